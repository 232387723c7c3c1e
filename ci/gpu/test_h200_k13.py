"""K13's leave-one-out proof (tests/contract/serve/test_k13_proof.py) on a CUDA vLLM 0.17-0.21, float32.

The contract module's two tests run unchanged against the GPU ``spec`` (the CUDA tolerance row, shorter waits):
the tiny Llama, ids 1-4, ``--max-num-batched-tokens 64`` with chunked prefill on, so the 32 requests in flight
share each step's 64 tokens and many prompts end on a chunk that fits in the KV block they hold (block 16 on
CUDA).  The third test is the GPU's own: in the left-out run, every token that is off HF is in the tail of its
file, i.e. the symptom is the final prefill chunk and nothing else (an order or layer bug would hit whole files).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from ci.gpu.serve_records import recorded
from tests.contract.serve import test_k13_proof as contract
from tests.contract.serve.conftest import serve_lane, vllm_base, vllm_patches, work_dir  # noqa: F401
from tests.contract.serve.test_k13_proof import needed  # noqa: F401

RUNS: dict = {}  # run name -> (spec, outcome), for the tail test


@pytest.fixture(autouse=True)
def on_cuda(monkeypatch):
    base = contract.spec

    def spec(name):
        return replace(base(name), work_dir=work_dir(f"{name}-cuda"), device="cuda", start_timeout_s=240.0,
                       client_timeout_s=150.0)

    def keep(run):
        def wrapper(one):
            outcome = run(one)
            RUNS[one.work_dir.name] = (one, outcome)
            return outcome
        return wrapper

    monkeypatch.setattr(contract, "spec", spec)
    monkeypatch.setattr(contract, "run", recorded(keep(contract.run), lambda s: s.work_dir.name))


test_without_k13_final_chunks_are_silently_wrong = contract.test_without_k13_final_chunks_are_silently_wrong
test_with_k13_every_row_equals_hf = contract.test_with_k13_every_row_equals_hf


def tails(files: list[dict]) -> list[dict]:
    """The files with tokens off HF; each says whether those tokens are exactly its last ones."""
    return [{"file": f["file"], "tokens": f["tokens"], "bad": [f["bad_tokens"][0], len(f["bad_tokens"])],
             "tail": f["bad_tokens"] == list(range(f["bad_tokens"][0], f["tokens"]))}
            for f in files if f["bad_tokens"]]


def test_left_out_only_the_tail_of_a_file_is_wrong():
    """Run after the left-out test (same module): K13's symptom is the final chunk's tokens, not whole files."""
    from ci.gpu.serve_rows import per_file
    from compat.shared.tolerance import choose

    if "k13-left-out-cuda" not in RUNS:
        pytest.fail("the left-out run did not run in this session (run the module whole)")
    one, _ = RUNS["k13-left-out-cuda"]
    files = per_file(one.model, one.work_dir, one.rows, choose(one.dtype, one.device).rtol)
    wrong = tails(files)
    print({"files": len(files), "wrong": wrong})
    assert len(files) == 44 and wrong, f"no file off HF among {len(files)}"
    assert all(w["tail"] for w in wrong), wrong
