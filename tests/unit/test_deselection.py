"""Marker-based deselection: an old-path lane deselects the serve tests (never collects them to skip them) and
says which and why; a serve lane selects exactly them.  Runs pytest's own collection on the real contract tree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVE = "tests/contract/serve"


def collect(*args: str) -> tuple[list[str], str]:
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    nodes = [line for line in proc.stdout.splitlines() if "::" in line and not line.startswith(" ")]
    return nodes, proc.stdout


def serve_tests() -> list[str]:
    nodes, _ = collect("-m", "", SERVE)
    assert nodes, "the serve tests should be collectable"
    return nodes


def test_an_old_path_selection_deselects_every_serve_test_and_says_which_and_why():
    every = serve_tests()
    nodes, out = collect("-m", "contract", SERVE, "tests/contract/test_oracle.py")
    assert nodes and not [n for n in nodes if n.startswith(SERVE)]
    summary = out.split("deselected by -m 'contract'", 1)[1]
    lines = [line for line in summary.splitlines() if "(serve: the modern path" in line]  # serve, or serve + another
    assert sum(int(line.split(" deselected", 1)[0]) for line in lines) == len(every)
    assert all(any(module in line for line in lines) for module in {n.split("::")[0] for n in every})  # which files
    assert "SKIPPED" not in out and "skipped" not in out.split("deselected by", 1)[1]


def test_a_serve_selection_takes_exactly_the_serve_tests():
    nodes, out = collect("-m", "serve", SERVE)
    assert sorted(nodes) == sorted(serve_tests()) and "deselected" not in out


def test_a_proof_deselection_names_both_reasons_and_k_is_told_apart():
    nodes, out = collect("-m", "contract and not proof", SERVE, "tests/contract/test_revert.py", "-k",
                         "not test_revert_on_disk")
    assert nodes and not [n for n in nodes if n.startswith(SERVE) or "test_revert_on_disk" in n]
    summary = out.split("deselected by -m 'contract and not proof' -k 'not test_revert_on_disk'", 1)[1]
    assert "1 deselected (not matched by -k) in tests/contract/test_revert.py" in summary
    assert any(line.split(" (", 1)[1].startswith("proof: ") and "serve: " in line for line in summary.splitlines()
               if "test_k1_proof.py" in line)
