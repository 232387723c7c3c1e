"""Lanes are built by uv from the sources pip is configured with (fixtures/uv_install.py).

The expectations come from pip's documented behaviour: `pip config list` prints each file's settings and then
``PIP_*`` (":env:"), a later one overriding an earlier one, and pip takes the best version across all indexes.
The last test builds a real lane with a real uv from a wheel that only pip's configuration names.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from fixtures import uv_install

ROOT = Path(__file__).resolve().parents[2]

# what pip 23-26 prints here, /etc/pip.conf first, then PIP_FIND_LINKS
CONFIG_LIST = """\
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/wheels'
user.timeout='30'
:env:.default-timeout='180'
:env:.find-links='/srv/wheels'
"""


def test_pips_install_settings_are_read_and_the_environment_wins():
    settings = uv_install.pip_settings(CONFIG_LIST)
    assert settings["find-links"] == "/srv/wheels"  # PIP_FIND_LINKS overrides pip.conf, as in pip
    assert settings["extra-index-url"] == "file:///opt/pypi/simple file:///opt/pypi-more/simple"
    assert settings["constraint"] == "/etc/xdg/pip/constraints.txt"
    assert "timeout" not in settings  # the user section is not an install setting


def test_uv_gets_every_source_and_pips_choice_across_indexes():
    options = uv_install.source_options(uv_install.pip_settings(CONFIG_LIST))
    pairs = list(zip(options[::2], options[1::2]))
    assert ("--index-strategy", "unsafe-best-match") in pairs
    assert ("--find-links", "/srv/wheels") in pairs
    assert ("--extra-index-url", "file:///opt/pypi/simple") in pairs
    assert ("--extra-index-url", "file:///opt/pypi-more/simple") in pairs
    assert ("--constraint", "/etc/xdg/pip/constraints.txt") in pairs


def test_no_index_and_the_certificate_reach_uv():
    settings = uv_install.pip_settings(":env:.no-index='1'\nglobal.cert='/etc/ca.pem'\n")
    assert "--no-index" in uv_install.source_options(settings)
    assert uv_install.environment(settings, {})["SSL_CERT_FILE"] == "/etc/ca.pem"


def test_a_pip_that_cannot_say_its_settings_is_an_error(tmp_path):
    with pytest.raises(RuntimeError, match="pip config list failed"):
        uv_install.read_pip_settings(Path(sys.executable).with_name("no-such-python"))


def _wheel(folder: Path, name: str, version: str) -> Path:
    """A minimal pure-Python wheel (PEP 427): a module, METADATA, WHEEL, RECORD."""
    path = folder / f"{name}-{version}-py3-none-any.whl"
    files = {f"{name}.py": f"VERSION = {version!r}\n",
             f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{name}-{version}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                                 "Tag: py3-none-any\n"}
    record = []
    with zipfile.ZipFile(path, "w") as archive:
        for arc, text in files.items():
            archive.writestr(arc, text)
            digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
            record.append(f"{arc},sha256={digest},{len(text)}")
        record.append(f"{name}-{version}.dist-info/RECORD,,")
        archive.writestr(f"{name}-{version}.dist-info/RECORD", "\n".join(record) + "\n")
    return path


@pytest.fixture
def real_uv():
    """The kit's pinned uv (bootstrapped into the real kit cache once, as `.ci/run` does before any lane)."""
    from fixtures import tools

    return tools.uv()


def test_a_lane_is_built_by_uv_from_a_wheel_only_pips_configuration_names(real_uv, tmp_path, monkeypatch):
    """No index at all: the wheel is found only because PIP_FIND_LINKS reached uv; the test tools and the kit's own
    install are replaced (they need the registry), the lane's own steps are what is checked."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "lane_probe_pkg", "1.0")
    monkeypatch.setenv("SPECDEC_COMPAT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SPECDEC_COMPAT_UV", real_uv[0])
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # this machine's pip.conf out of the way
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")  # as on this machine and its CI
    spec = importlib.util.spec_from_file_location("lanes_uv_under_test", ROOT / "fixtures" / "lanes.py")
    lanes = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, lanes)
    spec.loader.exec_module(lanes)
    monkeypatch.setattr(lanes, "TEST_TOOLS", ["lane_probe_pkg>=1"])  # the registry's pytest is out of reach
    monkeypatch.setattr(lanes, "install_kit", lambda item, steps, prefix="": None)
    item = lanes.lane(name="uv-probe", python=f"{sys.version_info[0]}.{sys.version_info[1]}",
                      steps=(("--no-deps", "lane_probe_pkg==1.0"), ("uninstall", "not-installed-anywhere")),
                      speculators=())
    monkeypatch.setattr(lanes, "_python", lambda version: sys.executable)
    lanes.build(item)
    proc = subprocess.run([str(item.bin / "python"), "-c", "import lane_probe_pkg; print(lane_probe_pkg.VERSION)"],
                          capture_output=True, text=True)
    assert proc.stdout.strip() == "1.0", proc.stderr
    assert item.is_built()
    # bytecode written at install, as pip writes it: where PYTHONDONTWRITEBYTECODE=1 nothing else ever writes it,
    # and every process would compile what it imports (`import vllm` 7.9 s instead of 3.2 s)
    compiled = list(item.venv.glob("lib/python*/site-packages/__pycache__/lane_probe_pkg.*.pyc"))
    assert compiled, sorted(p.name for p in item.venv.glob("lib/python*/site-packages/*"))
