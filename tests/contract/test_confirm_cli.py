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

from compat.confirm import TOLERANCE_RULE, num_layers


def test_confirm_shows_only_its_own_lines_and_keeps_vllm_log(patched_report, tiny_model, tmp_path):
    log, doc_path = tmp_path / "vllm.log", tmp_path / "confirm.json"
    proc = subprocess.run([sys.executable, "-m", "compat.confirm", "--model", tiny_model, "--log", str(log),
                           "--json-file", str(doc_path), "--calls", "1,11"], capture_output=True, text=True, cwd="/", timeout=900)
    shown = (proc.stderr + proc.stdout).splitlines()
    assert proc.returncode == 0, "\n".join(shown[-40:])
    assert str(log) in shown[0], shown[:3]  # the log's path comes first
    noise = [line for line in shown if not (line.startswith("confirm:") or line.startswith("  "))]
    assert not noise, f"lines that are not the kit's own: {noise[:10]}"
    text = log.read_text()
    assert "vllm" in text.lower() and len(text.splitlines()) > 10, text[:2000]
    assert any("seqs per call" in line for line in shown), shown
    doc = json.loads(doc_path.read_text())
    every = list(range(num_layers(tiny_model)))
    assert doc["layers"] == every and doc["tolerance"] == TOLERANCE_RULE
    for call in doc["calls"]:
        assert sorted(int(k) for k in call["layers"]) == every
    assert TOLERANCE_RULE in proc.stdout


def test_confirm_rejects_bad_calls_without_a_traceback(tiny_model):
    proc = subprocess.run([sys.executable, "-m", "compat.confirm", "--model", tiny_model, "--calls", "1,x"],
                          capture_output=True, text=True, cwd="/")
    assert proc.returncode == 2 and "--calls" in proc.stderr and "Traceback" not in proc.stderr


def test_confirm_rejects_a_path_that_is_no_checkpoint(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "compat.confirm", "--model", str(tmp_path)],
                          capture_output=True, text=True, cwd="/")
    assert proc.returncode == 2 and "no config.json" in proc.stderr and "Traceback" not in proc.stderr
