"""A serve report judged again with today's bounds, from the raw figures it kept: measured once, judged many times.

A report keeps, per check, what was measured (each id's worst row error, the logprobs' largest difference, the
files and chunking facts) beside the verdict of the bounds of its day.  When a bound is re-measured (a dtype's
logits bound from a wider model, the same-engine bound from vLLM's own spread on a GPU), the records taken before
are not re-run: their figures are judged again here, by the same rules the runner applies
(:func:`compat.serve.runner.decide`).  A check whose figures the report did not keep stays as it was judged, and so
does every check of a report that names no dtype (nothing picks today's bound for it).
ERROR stays ERROR: there is nothing to judge.
"""

from __future__ import annotations

import copy

from compat.shared.tolerance import choose

from . import logit_bounds
from .runner import ServeResult, decide

#: check name -> the reference its bound is taken against (compat.shared.tolerance.choose)
ROW_CHECKS = {"hf_rows": "hf", "recompute": "hf", "twin": "twin"}


def device_of(doc: dict) -> str:
    """Where the engine ran: the report's ``confirmed`` block, else its recompute's device, else ``cpu``."""
    confirmed = doc.get("confirmed") or {}
    device = confirmed.get("device")
    if isinstance(device, dict):
        device = device.get("type")
    return str(device or (doc.get("checks", {}).get("recompute") or {}).get("device") or "cpu")


def rejudge(doc: dict) -> ServeResult:
    """``doc``'s checks and verdict under today's bounds (a copy; ``doc`` is left as it was)."""
    checks = copy.deepcopy(doc.get("checks") or {})
    options = doc.get("options") or {}
    dtype = options.get("dtype") or (doc.get("confirmed") or {}).get("dtype")
    start = "ERROR" if doc.get("verdict") == "ERROR" else "OK"
    if dtype is None:  # a report that names no dtype cannot pick today's bound: its checks stand as judged
        return decide(ServeResult(start, doc.get("reason", "") if start == "ERROR" else "", checks=checks))
    device = device_of(doc)
    for name, reference in ROW_CHECKS.items():
        check = checks.get(name)
        if not check or not isinstance(check.get("worst"), dict) or not check["worst"]:
            continue
        tol = choose(dtype, device, options.get("rtol"), reference)
        over = {k: v for k, v in check["worst"].items() if v > tol.rtol}
        check.update(rule=tol.rule, over=over, ok=not over)
        check.pop("failed_comparisons", None)
        if over:
            check["failed_comparisons"] = sorted(over)
    logprobs = checks.get("logprobs")
    if logprobs and "max_abs_diff" in logprobs:
        measured = logit_bounds.bound_for(dtype)
        if measured is not None:
            ok = logprobs.get("compared", 0) > 0 and float(logprobs["max_abs_diff"]) <= measured.bound
            logprobs.update(bound=measured.bound, bound_basis=measured.basis, ok=ok)
    return decide(ServeResult(start, doc.get("reason", "") if start == "ERROR" else "", checks=checks))
