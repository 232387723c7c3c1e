"""benchmarks/cpu_by_process.py: every process of the tree counted, orphans included, each under its role."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "benchmarks" / "cpu_by_process.py"
PY = sys.executable  # not a pyenv shim, whose shells would be counted too
BURN = "import time; t = time.process_time()\nwhile time.process_time() - t < 0.6: pass"


def _run(shell: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), "--interval", "0.05", "--", "bash", "-c", shell],
                          capture_output=True, text=True, timeout=120)


def test_an_orphan_outliving_the_command_is_counted_and_the_exit_code_kept():
    """The command starts a burner in a subshell (an orphan once the shell exits) and exits 3 at once: the exact
    total still holds the orphan's 0.6 CPU seconds (it is reaped by the tool), and the tool exits 3."""
    proc = _run(f"({PY} -c '{BURN}' &); exit 3")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    exact = float(re.search(r"CPU ([\d.]+) s exact", proc.stdout).group(1))
    assert exact >= 0.55, proc.stdout
    assert re.search(r"^python -c \(a probe or import\)\s+1\s+0\.[5-9]", proc.stdout, re.M), proc.stdout


def test_each_process_is_listed_under_its_role_by_its_command_line():
    proc = _run(f"{PY} -c '{BURN}'; {PY} -m compat.apply --help >/dev/null; true")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    roles = dict(re.findall(r"^(\S[^\n]*?)\s{2,}(\d+)\s+[\d.]+\s+\d+%$", proc.stdout, re.M))
    assert roles.get("python -c (a probe or import)") == "1", proc.stdout
    assert roles.get("compat apply (a tree written)") == "1" and roles.get("shell") == "1", proc.stdout
