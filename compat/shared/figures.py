"""What a contract test keeps of a measurement, and the verdict today's bounds give it: measured once, judged many.

A test that judges per-layer errors against the bound (compat.shared.tolerance) keeps the figures the judgement
reads -- each layer's worst (``within``: every one must be at or under the bound) or least (``beyond``: every one
must be over it, the bf16 rejection) ``max|diff| / mean|h_ref|`` over its calls, the dtype, device and reference
that pick the bound, and any problem no bound decides (order, shapes, a zero scale) -- and asserts :func:`judge`.
The record of the cell keeps the figures beside the test's outcome (ci/cell.py), so a changed bound judges the
record again from them (ci/judge.py) instead of running vLLM again.  The serve path's reports do the same through
compat.serve.judge.
"""

from __future__ import annotations

from compat.shared.tolerance import choose

#: the figures' format (a record's figures of another format are not judged again: their verdict stays as run)
FORMAT = 1
RULES = ("within", "beyond")


def layer_figures(rule: str, per_layer: dict, dtype: str = "float32", device: str | None = "cpu",
                  reference: str = "hf", problems: list[str] = (), floor: float | None = None) -> dict:
    """The figures of one judgement: ``per_layer`` layer -> rel diff (worst over the calls for ``within``, least
    for ``beyond``); ``floor``: a bound the test never goes under whatever the table says (the bf16 rejection is
    judged at least at the CPU bound)."""
    if rule not in RULES:
        raise ValueError(f"rule {rule!r} is not one of {RULES}")
    return {"format": FORMAT, "kind": "layers", "rule": rule, "dtype": dtype, "device": device,
            "reference": reference, "per_layer": {str(k): float(v) for k, v in per_layer.items()},
            "problems": list(problems), **({"floor": floor} if floor is not None else {})}


def bound(figures: dict) -> float:
    """Today's bound for the figures' dtype, device and reference (never under their ``floor``)."""
    rtol = choose(figures.get("dtype") or "float32", figures.get("device"), reference=figures.get("reference") or "hf").rtol
    return max(rtol, figures["floor"]) if figures.get("floor") is not None else rtol


def judge(figures: dict) -> tuple[bool, str]:
    """(passed, why) of ``figures`` under today's bound."""
    if figures.get("format") != FORMAT or figures.get("rule") not in RULES:
        raise ValueError(f"figures of format {figures.get('format')!r} / rule {figures.get('rule')!r}: not judged here")
    rtol = bound(figures)
    per_layer = {k: float(v) for k, v in (figures.get("per_layer") or {}).items()}
    if figures.get("problems"):
        return False, f"{len(figures['problems'])} problem(s) no bound decides: {figures['problems'][0]}"
    if not per_layer:
        return False, "no layer was measured"
    if figures["rule"] == "within":
        over = {k: v for k, v in per_layer.items() if not v <= rtol}
        worst = max(per_layer.values())
        if over:
            return False, f"layers {sorted(over, key=int)} over the bound {rtol:g} (worst {worst:.3e})"
        return True, f"every layer within {rtol:g} (worst {worst:.3e})"
    under = {k: v for k, v in per_layer.items() if not v > rtol}
    least = min(per_layer.values())
    if under:
        return False, f"layers {sorted(under, key=int)} within the bound {rtol:g} (least {least:.3e}): not rejected"
    return True, f"every layer over {rtol:g} (least {least:.3e})"


#: a JSON-lines file a cell's runner names: each judging test appends ``{"test": node id, "figures": ...}`` to it
ENV = "SPECDEC_COMPAT_FIGURES"


def keep(node_id: str, figures: dict) -> dict:
    """Append ``figures`` of test ``node_id`` to the file ``$SPECDEC_COMPAT_FIGURES`` names (none: nothing kept)."""
    import json
    import os

    path = os.environ.get(ENV)
    if path:
        with open(path, "a") as out:
            out.write(json.dumps({"test": node_id, "figures": figures}) + "\n")
    return figures


def read(path) -> dict[str, list[dict]]:
    """node id -> the figures its test kept (in order), from a file :func:`keep` appended to."""
    import json
    from pathlib import Path

    found: dict[str, list[dict]] = {}
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        try:
            item = json.loads(line)
        except ValueError:
            continue
        found.setdefault(item["test"], []).append(item["figures"])
    return found
