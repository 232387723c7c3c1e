"""``pip install .`` builds the wheel users get: quietly, and with every module and data file.

setuptools warns (45 lines, "Package 'compat.surfaces' is absent from the `packages` configuration") when
package data sits in a folder that is no declared package; a future setuptools drops such files.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import compat

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_builds_without_setuptools_warnings_and_holds_every_file(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "-v", "-w",
                           str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=600)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    warnings = [line for line in output.splitlines() if "_Warning" in line or "SetuptoolsDeprecationWarning" in line
                or "absent from the `packages`" in line]
    assert not warnings, "\n".join(warnings)
    (built,) = tmp_path.glob("specdec_compat-*.whl")
    assert built.name.startswith(f"specdec_compat-{compat.__version__}-"), built.name  # the version's one source
    with zipfile.ZipFile(built) as archive:
        shipped = set(archive.namelist())
    expected = {p.relative_to(ROOT).as_posix() for p in (ROOT / "compat").rglob("*")
                if p.is_file() and "__pycache__" not in p.parts and p.suffix in (".py", ".json")}
    expected |= {f"compat/patches/{p.name}" for p in (ROOT / "patches").glob("*.py")}
    assert any(name.startswith("compat/surfaces/vllm-") for name in expected)
    assert not expected - shipped, sorted(expected - shipped)
