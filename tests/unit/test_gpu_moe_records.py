"""The GPU MoE records judged by the routing-tie rule, and the page generated from them (no torch needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compat.shared.tolerance import ROUTING_TIE

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("scenario, verdict", [("ds_pinned_int4_hf", "OK"), ("ds_int4_hf", "OK"),
                                               ("ds_pinned_int4_no_order", "WRONG")])
def test_the_h200_moe_runs_judged_by_the_routing_tie_rule(scenario, verdict):
    from ci.gpu.record import rejudge_routing

    records = {r["scenario"]: r for r in json.loads((ROOT / "docs/gpu/records_moe.json").read_text())}
    assert rejudge_routing(records[scenario], ROUTING_TIE["bfloat16"])[0] == verdict


def test_a_tie_bound_below_the_measured_margins_calls_the_natural_run_wrong():
    from ci.gpu.record import rejudge_routing

    records = {r["scenario"]: r for r in json.loads((ROOT / "docs/gpu/records_moe.json").read_text())}
    assert rejudge_routing(records["ds_int4_hf"], 1e-5)[0] == "WRONG"


def test_the_moe_page_is_generated_from_its_records():
    from ci.gpu import moe_page

    assert moe_page.main(["--check"]) == 0, "docs/gpu/moe/README.md is stale: python -m ci.gpu.moe_page"
