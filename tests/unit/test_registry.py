"""The registry on real and mutated surfaces (hypothesis).

Properties: a patch is never selected when its precondition fails, and every
unknown a candidate patch depends on is reported as unknown-surface.
"""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from compat.probes import Unknown
from compat.registry import judge, load_patches
from compat.surface import SURFACES as SURFACES_DIR, Surface

PATCHES = load_patches()
SURFACES = sorted(SURFACES_DIR.glob("vllm-*.json"))
OBSERVED: dict[str, set] = {}
for _path in SURFACES:
    for _name, _value in json.loads(_path.read_text())["probes"].items():
        if not isinstance(_value, dict):
            OBSERVED.setdefault(_name, set()).add(_value)
for _patch in PATCHES:
    for _name, _accepted in _patch.requires.items():
        OBSERVED.setdefault(_name, set()).update(_accepted)
OBSERVED.setdefault("speculators.generator", set()).update({"0.3.0", "0.4.x", "absent"})
NAMES = sorted(OBSERVED)


def _base(version: str = "0.32.0") -> Surface:
    values = {name: sorted(vals, key=repr)[0] for name, vals in OBSERVED.items()}
    return Surface({"vllm": {"version": version}, "speculators": {"version": "0.4.0.1"}}, values, {})


values = st.one_of(
    st.sampled_from(sorted({v for vals in OBSERVED.values() for v in vals}, key=repr)),
    st.text(max_size=8),
    st.builds(Unknown, st.text(min_size=1, max_size=10)),
)
mutations = st.dictionaries(st.sampled_from(NAMES), values, max_size=12)
deletions = st.sets(st.sampled_from(NAMES), max_size=4)
renames = st.dictionaries(st.sampled_from(NAMES), st.text(min_size=1, max_size=12), max_size=3)
vllm_versions = st.sampled_from(["0.10.2", "0.11.0", "0.12.0", "0.16.0rc2.dev123+gabc1234", "0.29.0", "0.32.0", "0.40.0.dev3+g1.cu129"])


def _mutate(surface, changes, removed, renamed):
    vals = dict(surface.values)
    vals.update(changes)
    for name in removed:
        vals.pop(name, None)
    for old, new in renamed.items():
        if old in vals:
            vals[new] = vals.pop(old)
    return Surface(surface.packages, vals, {})


@settings(max_examples=300, deadline=None)
@given(mutations, deletions, renames, vllm_versions)
def test_never_selects_a_patch_whose_precondition_fails(changes, removed, renamed, version):
    surface = _mutate(_base(version), changes, removed, renamed)
    for patch in PATCHES:
        decision = judge(patch, surface)
        if decision.verdict != "needed":
            continue
        variant = surface.values.get(patch.variant_probe)
        assert variant in patch.edits
        for name, accepted in patch.requires.items():
            assert name in surface.values and surface.values[name] in accepted, (patch.id, name)


@settings(max_examples=300, deadline=None)
@given(mutations, deletions, renames)
def test_every_unknown_a_patch_depends_on_is_reported(changes, removed, renamed):
    surface = _mutate(_base(), changes, removed, renamed)
    for patch in PATCHES:
        decision = judge(patch, surface)
        if decision.verdict == "out-of-range":
            continue
        deps = [patch.variant_probe, *(() if patch.retired else patch.requires)]  # retired: needs no probe
        unknown = [n for n in deps if n not in surface.values or isinstance(surface.values[n], Unknown)]
        variant = surface.values.get(patch.variant_probe)
        if patch.variant_probe not in unknown and variant not in patch.edits:
            assert decision.verdict == "not-needed", (patch.id, variant, decision.verdict)
        elif unknown:
            assert decision.verdict == "unknown-surface", (patch.id, unknown, decision.verdict)
            if patch.variant_probe not in unknown:
                assert all(n in decision.reason for n in unknown)
        else:
            assert decision.verdict != "unknown-surface"


def test_prefilter_uses_prereleases():
    surface = _base("0.29.0rc1.dev5+gdeadbee")
    layout = next(p for p in PATCHES if p.id == "vllm.cache_config.kv_cache_layout_resolution")
    surface.values["cache_config.kv_cache_layout_resolution"] = "required"
    surface.values["speculators.generator"] = "0.4.x"
    assert judge(layout, surface).verdict == "needed"
    assert judge(layout, _base("0.27.1")).verdict == "out-of-range"  # prefilter >=0.28.0.dev0 (coarse: nightlies)


def test_an_unreadable_probe_does_not_block_a_generator_the_patch_never_touches():
    """Model Runner V2 only matters to speculators 0.4.x: a 0.3.0 plan must not turn UNKNOWN over it."""
    surface = Surface.from_json(json.loads((SURFACES_DIR / "vllm-0.32.0.json").read_text()))
    surface.packages["speculators"] = {"version": "0.3.0"}
    surface.values["speculators.generator"] = "0.3.0"
    surface.values["runner.v2_selected"] = Unknown("unreadable")
    v2 = next(p for p in PATCHES if p.id == "vllm.runner.v2_has_no_input_batch")
    assert "0.3.0" not in v2.edits  # upstream fact: speculators 0.3.0 never reads model_runner.input_batch
    assert judge(v2, surface).verdict == "not-needed"
    surface.packages["speculators"] = {"version": "0.4.0.1"}
    surface.values["speculators.generator"] = "0.4.x"
    assert judge(v2, surface).verdict == "unknown-surface"
