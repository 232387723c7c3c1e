"""Which pipeline a speculators release, an install and a patch belong to: one table (compat/pipelines.py).

Expected values are speculators' own releases: 0.3.0 and 0.4.x ship ``VllmHiddenStatesGenerator``
(``speculators/data_generation/vllm_hidden_states_generator.py``), 0.5.0 and later generate through ``vllm serve``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from compat import pipelines, registry

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("version, name", [("0.3.0", "generator"), ("0.4.0.1", "generator"), ("0.4.1", "generator"),
                                           ("0.5.0", "serve"), ("0.7.0.2", "serve"),
                                           ("0.9.0", "serve"), ("0.10.0.dev3", "serve")])
def test_each_release_takes_the_pipeline_it_ships(version, name):
    assert pipelines.for_speculators(version).name == name


@pytest.mark.parametrize("version", [None, "", "abc", "0.9.x", "0.5.0rc1"])
def test_an_unreadable_version_takes_no_pipeline(version):
    """0.5.0rc1: a pre-release of the first serve release, which neither range claims (PEP 440: ``<0.5.0`` excludes
    it); whether it still ships the generator cannot be read from its number, so the caller asks."""
    assert pipelines.for_speculators(version) is None


def test_every_serve_patch_and_no_other_is_the_serve_pipelines():
    serve = {p.id for p in registry.load_patches("serve")}
    generator = {p.id for p in registry.load_patches()}
    assert serve and generator
    assert {pipelines.of_patch_id(i).name for i in serve} == {"serve"}
    assert {pipelines.of_patch_id(i).name for i in generator} == {"generator"}


def _site(tmp_path: Path, version: str | None) -> Path:
    """A folder holding a speculators package and its dist-info (the shape pip writes), ``version`` in METADATA."""
    site = tmp_path / "site"
    (site / "speculators").mkdir(parents=True)
    (site / "speculators" / "__init__.py").write_text("")
    if version is not None:
        info = site / f"speculators-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: speculators\nVersion: {version}\n")
        (info / "RECORD").write_text(f"speculators/__init__.py,,\nspeculators-{version}.dist-info/METADATA,,\n")
    return site


def _picked(tmp_path, version):
    code = ("import json; from compat.confirm_command import installed_pipeline; p, read = installed_pipeline(); "
            "print(json.dumps([p and p.name, read]))")
    env = {"PYTHONPATH": f"{_site(tmp_path, version)}:{ROOT}", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("version, name", [("0.4.0.1", "generator"), ("0.9.0", "serve")])
def test_the_installed_speculators_picks_the_pipeline(tmp_path, version, name):
    picked, read = _picked(tmp_path, version)
    assert picked == name and version in read


def test_a_speculators_no_distribution_owns_is_no_pipeline(tmp_path):
    picked, read = _picked(tmp_path, None)
    assert picked is None and read


def test_confirm_without_path_and_without_speculators_refuses_naming_why(tmp_path):
    site = _site(tmp_path, None)
    (site / "speculators" / "__init__.py").unlink()
    (site / "speculators").rmdir()
    env = {"PYTHONPATH": f"{site}:{ROOT}", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    code = "import sys; from compat.confirm_command import main; sys.exit(main(['--model', 'm']))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    if "speculators is not installed" not in proc.stderr:
        pytest.skip("this interpreter can import a speculators of its own")
    assert proc.returncode == 2
    assert proc.stderr.startswith("confirm: cannot tell which pipeline to confirm: speculators is not installed")
    assert "--path generator" in proc.stderr and "--path serve" in proc.stderr
