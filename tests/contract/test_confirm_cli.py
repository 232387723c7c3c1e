"""e. ``compat confirm`` as a user runs it: the kit's own lines only, vLLM's log in a file.

The patched lane's generator, run through the real command line, must say
where vLLM's log is before anything else, keep the terminal free of vLLM's and
torch's noise, write the log as it goes, and report every layer against the
per-layer tolerance rule.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from compat.confirm import TOLERANCE_RULE, num_layers
from compat.confirm import choose


def test_confirm_shows_only_its_own_lines_and_keeps_vllm_log(confirm_report, tiny_model, engine_device):
    """The cell's one real ``python -m compat.confirm --log L --json-file J --calls 1,11`` (confirm_runs.start, forked_runs, finish)."""
    run = confirm_report["cli"]
    log, doc_path = Path(run["log"]), Path(run["json_file"])
    shown = (run["stderr"] + run["stdout"]).splitlines()
    assert run["returncode"] == 0, "\n".join(shown[-40:])
    assert str(log) in shown[0], shown[:3]  # the log's path comes first
    noise = [line for line in shown if not (line.startswith("confirm:") or line.startswith("  "))]
    assert not noise, f"lines that are not the kit's own: {noise[:10]}"
    text = log.read_text()
    assert "vllm" in text.lower() and len(text.splitlines()) > 10, text[:2000]
    assert any("seqs per call" in line for line in shown), shown
    doc = json.loads(doc_path.read_text())
    every = list(range(num_layers(tiny_model)))
    rule = TOLERANCE_RULE if engine_device == "cpu" else choose("float32", engine_device).rule
    assert doc["layers"] == every and doc["tolerance"].startswith(rule)  # then how the bound was chosen
    assert [c["n"] for c in doc["calls"]] == [1, 11, 33, 1]  # --calls, then the batch and repeat invariants
    for call in doc["calls"]:
        assert sorted(int(k) for k in call["layers"]) == every
    assert rule in run["stdout"]


def test_confirm_rejects_bad_calls_without_a_traceback(tiny_model):
    proc = subprocess.run([sys.executable, "-m", "compat.confirm", "--model", tiny_model, "--calls", "1,x"],
                          capture_output=True, text=True, cwd="/")
    assert proc.returncode == 2 and "--calls" in proc.stderr and "Traceback" not in proc.stderr


def test_confirm_rejects_a_path_that_is_no_checkpoint(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "compat.confirm", "--model", str(tmp_path)],
                          capture_output=True, text=True, cwd="/")
    assert proc.returncode == 2 and "no config.json" in proc.stderr and "Traceback" not in proc.stderr


def test_the_installed_files_held_the_full_set_while_confirm_ran(cell_report, confirm_report):
    """compat confirm's command line and its vllm-extract run read the installed files: until both had read every
    file they use (``confirm_runs.wait_until_read``) the files were the ones, bytes and mtimes,
    that the kit wrote before those two started; the cell's proofs import their variants from copies after."""
    held = cell_report["full_set"]
    assert held["when_confirm_started"] and held["when_it_had_read_them"] == held["when_confirm_started"], held
