"""The logits check's bound per dtype: the worst a right run measured, times a stated headroom.

The check rebuilds ``log_softmax(lm_head(norm(h_L)))`` from a file's final row and compares it with what the same
server returned for that prompt (``prompt_logprobs`` at positions 1..T-1, the first generated token's logprobs at
T).  A right capture differs only by the engine's own arithmetic against a float32 rebuild; a wrong final row (a
post-norm row, another layer's, another request's) moves them by 0.2 to O(1).  So the bound is measured, not
chosen: each entry names the records of right runs it was read from (runs whose rows a reference that reads no
logits showed right: HF's rows or the recompute), and ``tests/unit/test_logit_bounds.py`` reads those records
again and recomputes every bound.

The error grows with the model's width: bf16 logits of a 7168-wide model with Kimi-K2.5's vocabulary, rebuilt in
float32 from the bf16 final row, differ from the server's by 18x what a 128-wide model's do.  The bf16 bound
therefore comes from a real-width run, and at it a post-norm final row of a tiny spread-norm model (0.24) is no
longer told apart by the logits alone; the recompute's last step (into the final id) sees it at every width.

A dtype with no record has no bound: the check then says it could not judge (INCOMPLETE), never a guessed pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: How far above the worst right run a bound sits, where that run is a tiny model's: another model or GPU may be a
#: few times worse, and the faults the check exists for (O(1): another layer's or request's final row) stay far above.
HEADROOM = 10.0
#: Where the worst right run is already at a real model's width (the widest this check meets), less is needed.
HEADROOM_AT_REAL_WIDTH = 3.0


@dataclass(frozen=True)
class MeasuredBound:
    dtype: str
    measured: float  # the worst max|rebuilt - served| over the records below
    records: tuple  # "path#/json/pointer" of each right run's logprobs check, the repository's docs/
    headroom: float = HEADROOM

    @property
    def bound(self) -> float:
        return round_up(self.measured * self.headroom)

    @property
    def basis(self) -> str:
        return (f"{self.headroom:g} x the worst right {self.dtype} run ({self.measured:g}, "
                f"{len(self.records)} records)")


def round_up(value: float, digits: int = 2) -> float:
    """``value`` rounded up to ``digits`` significant digits (a bound never lands under its measurement)."""
    if value <= 0:
        return 0.0
    scale = 10 ** (digits - 1 - math.floor(math.log10(value)))
    return math.ceil(value * scale - 1e-9) / scale


BOUNDS = {
    "bfloat16": MeasuredBound("bfloat16", 0.0884, (
        "docs/gpu/self/h100/confirm_real26self.json#/checks/logprobs",
        "docs/gpu/self/h100/confirm_kh26self.json#/checks/logprobs",
        "docs/gpu/self/h100/confirm_kh26natself.json#/checks/logprobs",
        "docs/records/self-reference/h200/applied-self-bfloat16.json#/checks/logprobs",
        "docs/gpu/moe/h100/confirm_kh26pin.json#/checks/logprobs",
        "docs/gpu/moe/call4_confirm_ds20pin.json#/checks/logprobs",
        "docs/gpu/serve/summary.json#/9/logprobs",
    ), HEADROOM_AT_REAL_WIDTH),
    "float32": MeasuredBound("float32", 2.24e-05, (
        "docs/gpu/serve/summary.json#/7/logprobs",
        "docs/records/self-reference/serve/confirm-self-llama-spread.json#/checks/logprobs",
        "docs/records/self-reference/serve/confirm-self-kimi.json#/checks/logprobs",
        "docs/records/self-reference/serve-021/k13-applied.json#/checks/logprobs",
        "docs/records/self-reference/serve-021/k4-applied.json#/checks/logprobs",
    )),
}


def bound_for(dtype: str) -> MeasuredBound | None:
    return BOUNDS.get(dtype)
