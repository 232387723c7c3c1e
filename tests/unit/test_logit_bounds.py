"""The logits check's bounds are measured: each is recomputed here from the records it names (no vLLM needed).

Every record must be a right run -- its rows shown right by a reference that reads no logits (HF's rows or the
recompute) and its files whole -- and the bound must be the stated headroom times the worst logprob error over
those records, rounded up.  A record that goes missing, a figure edited in code, or a wrong run among the records
fails here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compat.serve import logit_bounds

ROOT = Path(__file__).resolve().parents[2]


def resolve(reference: str) -> tuple[dict, dict]:
    """(the record's document, the logprobs check it points at) of ``path#/json/pointer``."""
    path, pointer = reference.split("#", 1)
    doc = json.loads((ROOT / path).read_text())
    node = doc
    for part in pointer.strip("/").split("/"):
        node = node[int(part)] if isinstance(node, list) else node[part]
    parent = doc[int(pointer.strip("/").split("/")[0])] if isinstance(doc, list) else doc
    return parent, node


def right_run(doc: dict) -> bool:
    """Rows shown right without the logits: verdict OK, or the files whole and HF's rows or the recompute ok."""
    if doc.get("verdict") == "OK":
        return True
    checks = doc.get("checks") or {}
    return bool(checks.get("files", {}).get("ok")) and any(checks.get(k, {}).get("ok") is True
                                                             for k in ("hf_rows", "recompute"))


@pytest.mark.parametrize("dtype", sorted(logit_bounds.BOUNDS))
def test_each_bound_is_its_headroom_times_the_worst_right_run_on_record(dtype):
    measured = logit_bounds.BOUNDS[dtype]
    worst = 0.0
    for reference in measured.records:
        doc, check = resolve(reference)
        assert right_run(doc), f"{reference}: not a right run ({doc.get('verdict')})"
        assert check["compared"] > 0, reference
        worst = max(worst, float(check["max_abs_diff"]))
    assert worst == pytest.approx(measured.measured, rel=1e-9), (dtype, worst)
    assert measured.bound == logit_bounds.round_up(worst * measured.headroom)
    assert measured.bound >= worst * measured.headroom


def test_the_bf16_bound_comes_from_a_real_width_run():
    """The widest model on record sets the bf16 bound: a tiny model's runs alone would set it 18x too tight."""
    bf16 = logit_bounds.BOUNDS["bfloat16"]
    widths = {}
    for reference in bf16.records:
        doc, check = resolve(reference)
        model = json.dumps(doc.get("options", {})) + json.dumps(doc.get("confirmed", {}))
        widths[reference] = float(check["max_abs_diff"])
    assert max(widths.values()) == bf16.measured
    assert "real" in max(widths, key=widths.get)


def test_round_up_never_lands_under_the_value():
    for value in (0.0884 * 3, 2.24e-05 * 10, 0.1, 1.0, 123.456):
        assert value <= logit_bounds.round_up(value) <= value * 1.1
    assert logit_bounds.round_up(0.2652) == 0.27


def test_a_dtype_with_no_record_has_no_bound():
    assert logit_bounds.bound_for("float16") is None
