"""Probes declare the values they may return; patch declarations and plan rules are checked against them.

Why: a patch requiring a value no probe can return never applies, a plan rule comparing with one never fires,
and a probe meeting a shape upstream that no one has seen must say unknown rather than hand out a value a
rule would take for a known one.  The shipped surfaces (``compat/surfaces``, every vLLM release read by the
probes) and the wheels the release tests read are an independent check that the declarations are complete.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from ci import probe_comparisons
from compat import registry, upstream_facts
from compat.astkit import Reader
from compat.plan import INCOMPATIBLE
from compat.probes import PROBES, Reading, Unknown, probe
from compat.probes.base import OpenValues
from compat.probes.request_tokens import request_prompt_token_ids
from compat.sources import TreeSource, WheelSource
from compat.surface import SURFACES
from fixtures.wheels import wheel

ROOT = Path(__file__).resolve().parents[2]
PATCHES = registry.load_patches() + registry.load_patches("serve")


def _patch(patch_id: str):
    return next(p for p in PATCHES if p.id == patch_id)


# -- every probe declares ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PROBES))
def test_every_probe_declares_its_values(name):
    values = PROBES[name].values
    assert isinstance(values, OpenValues) or (isinstance(values, tuple) and values), values
    assert PROBES[name].declared


@pytest.mark.parametrize("values", [None, (), ["absent"], "absent"])
def test_a_probe_without_a_declaration_is_refused(values):
    with pytest.raises(ValueError, match="probe test.undeclared"):
        probe("test.undeclared", values=values)
    assert "test.undeclared" not in PROBES


def test_a_true_is_not_a_declared_one():
    """Declared values compare by type too: Python's ``True == 1`` must not let a bool stand for an int."""
    spec = PROBES["runner.sample_tokens_split"]
    assert spec.declares(True) and spec.declares(False)
    assert not spec.declares(1) and not spec.declares("True")


# -- an undeclared value is unknown -----------------------------------------------------------------------------


REQUEST = """\
class Request:
    def __init__(self, request_id, prompt_token_ids, sampling_params):
        self.request_id = request_id
        self.prompt_token_ids = {stored}
"""


def _request_tree(tmp_path: Path, stored: str) -> Reader:
    path = tmp_path / "vllm" / "v1" / "request.py"
    path.parent.mkdir(parents=True)
    path.write_text(REQUEST.format(stored=stored))
    return Reader(TreeSource(tmp_path, "vllm", "0.0.0"))


def test_a_value_the_probe_does_not_declare_is_unknown(tmp_path):
    """Request keeping its ids in a tuple (a shape no release had): the probe function names the wrapper, and
    the registered probe turns that undeclared value into unknown."""
    reader = _request_tree(tmp_path, "tuple(prompt_token_ids)")
    assert request_prompt_token_ids(reader).value == "tuple"
    result = PROBES["request.prompt_token_ids"].run(reader)
    assert isinstance(result, Unknown)
    assert "undeclared value 'tuple'" in result.reason and "vllm/v1/request.py:4" in result.reason


def test_a_declared_value_is_read(tmp_path):
    reader = _request_tree(tmp_path, "TokenBuffer(prompt_token_ids)")
    assert PROBES["request.prompt_token_ids"].run(reader) == Reading("TokenBuffer", "vllm/v1/request.py", 4)


# -- patch declarations and rule tables -------------------------------------------------------------------------


@pytest.mark.parametrize("patch", PATCHES, ids=lambda p: p.id)
def test_every_declaration_names_declared_values(patch):
    registry.validate(patch)


@pytest.mark.parametrize("change,named", [
    ({"requires": {"request.eos_token_id": ("missing",)}}, "requires request.eos_token_id='missing'"),
    ({"requires": {"runner.sample_tokens_split": ("True",)}}, "requires runner.sample_tokens_split='True'"),
    ({"requires": {"request.eos_token_id": "absent"}}, "must be a non-empty tuple"),
    ({"edits": {"0.5.x": {}}}, "edits variant speculators.generator='0.5.x'"),
    ({"known_loss": {"0.3": "pipeline-parallel size > 1"}}, "known_loss variant speculators.generator='0.3'"),
])
def test_a_declaration_naming_an_undeclared_value_is_refused(change, named):
    patch = replace(_patch("vllm.kv_cache.planning_module"), **change)
    with pytest.raises(registry.DeclarationError) as raised:
        registry.validate(patch)
    assert "vllm.kv_cache.planning_module" in str(raised.value) and named in str(raised.value)
    assert "declared:" in str(raised.value) or "tuple" in named


def test_a_serve_declaration_naming_an_undeclared_variant_is_refused():
    patch = next(p for p in PATCHES if p.variant_probe == "serve.connector.last_chunk")
    edits = dict(patch.edits, **{"skipped": next(iter(patch.edits.values()))})
    with pytest.raises(registry.DeclarationError, match=r"serve.connector.last_chunk='skipped', .*'no-cached-loop'"):
        registry.validate(replace(patch, edits=edits))


def test_the_plan_incompatible_table_names_declared_values():
    pairs = [(name, value) for _variant, name, value, _why in INCOMPATIBLE]
    pairs += [("speculators.generator", variant) for variant, *_rest in INCOMPATIBLE if variant is not None]
    registry.check_rule_values("compat.plan.INCOMPATIBLE", pairs)


def test_a_rule_table_naming_an_undeclared_value_is_refused():
    with pytest.raises(registry.DeclarationError, match=r"INCOMPATIBLE: compares kv_cache.from_groups.kv_cache_specs="
                                                        r"'no-functions'"):
        registry.check_rule_values("INCOMPATIBLE", [("kv_cache.from_groups.kv_cache_specs", "no-functions")])
    with pytest.raises(registry.DeclarationError, match="unknown probe 'kv_cache.no_such_probe'"):
        registry.check_rule_values("INCOMPATIBLE", [("kv_cache.no_such_probe", "absent")])


def test_the_upstream_tables_name_declared_values():
    """The tables that stand for a probe read on a release named by version only."""
    registry.check_rule_values("upstream_facts.SPECULATORS_GENERATOR",
                               (("speculators.generator", v) for v in upstream_facts.SPECULATORS_GENERATOR.values()))
    registry.check_rule_values("upstream_facts.TRANSFORMERS_CHANGES",
                               ((name, value) for name, (_since, *values) in upstream_facts.TRANSFORMERS_CHANGES.items()
                                for value in values))


# -- comparisons in code ------------------------------------------------------------------------------------------


PLANTED = '''\
def rules(surface):
    v = surface.values.get
    if v("serve.method") == "abscent":
        pass
    state = surface.values.get("serve.layer_ids.repeated")
    if state in ("repeated-ids-kill-engine", "repeated-ids-collapsed"):
        pass
    label = {"no-wait-event": 1, "no-stream-contexts": 2}.get(v("serve.cpu.stream_stand_ins"))
    if surface.value("serve.cpu.v2_runner") != "needs-triton-cpu":
        pass
    return "absent" == surface.values["serve.v2.extractor"]


def loops(surface, names):
    for state in names:
        if state == "anything":
            pass
'''


def test_the_comparisons_checker_finds_planted_undeclared_values(tmp_path):
    module = tmp_path / "planted.py"
    module.write_text(PLANTED)
    found = probe_comparisons.undeclared_comparisons(module)
    assert [line.split(": ", 1)[0] for line in found] == [f"{module}:3", f"{module}:6", f"{module}:8"]
    assert "serve.method compared with 'abscent'" in found[0] and "'present'" in found[0]
    assert "serve.layer_ids.repeated compared with 'repeated-ids-collapsed'" in found[1]
    assert "serve.cpu.stream_stand_ins compared with 'no-stream-contexts'" in found[2]
    read = {(name, value) for _where, name, value in probe_comparisons.probe_comparisons(module)}
    assert {("serve.cpu.v2_runner", "needs-triton-cpu"), ("serve.v2.extractor", "absent")} <= read


def _kit_modules():
    return sorted([*(ROOT / "compat").rglob("*.py"), *(ROOT / "patches").rglob("*.py")])


def test_no_module_of_the_kit_compares_a_probe_with_an_undeclared_value():
    found = [line for path in _kit_modules() for line in probe_comparisons.undeclared_comparisons(path)]
    assert not found, "\n".join(found)


def test_the_serve_plan_rules_are_read_by_the_checker():
    """The checker sees the serve plan's rules, the local-variable and the dict-lookup forms included: a rule it
    cannot read would pass unchecked."""
    read = {(name, value) for _where, name, value in probe_comparisons.probe_comparisons(ROOT / "compat/serve/plan.py")}
    assert {("serve.method", "absent"), ("serve.cpu.v2_runner", "needs-triton-cpu-on-x86"),
            ("serve.cpu.sampler_dispatch", "swap-misses-dispatcher"), ("serve.cpu.stream_stand_ins", "no-wait-event"),
            ("serve.layer_ids.repeated", "repeated-ids-collapse")} <= read


# -- real values fall inside the declarations ------------------------------------------------------------------


def _recorded():
    for path in sorted(SURFACES.glob("vllm-*.json")):
        for name, value in json.loads(path.read_text())["probes"].items():
            if not (isinstance(value, dict) and "unknown" in value):
                yield path.name, name, value


@pytest.mark.parametrize("name", sorted({name for _file, name, _value in _recorded()}))
def test_every_value_a_shipped_surface_records_is_declared(name):
    """Every vLLM release's surface, read by the probes when it was made: a value there that the probe does not
    declare means the declaration is incomplete."""
    assert name in PROBES
    missing = {f"{file}: {value!r}" for file, probe_name, value in _recorded()
               if probe_name == name and not PROBES[name].declares(value)}
    assert not missing, f"{name} declares {PROBES[name].declared}"


#: the other packages' wheels the release tests read (tests/unit/test_serve_probes.py, test_probes_releases.py),
#: and vLLM 0.34 (the newest shapes: TokenBuffer, the extensible KV cache, V1 removed)
WHEELS = {
    "speculators": ["speculators==0.3.0", "speculators==0.4.0.1", "speculators==0.5.0", "speculators==0.9.0"],
    "transformers": ["transformers==4.57.6", "transformers==5.24.0"],
    "hs_connectors": ["hs-connectors==0.7.0", "hs-connectors==0.9.0"],
    "vllm": ["vllm==0.34.0"],
}


@pytest.mark.parametrize("package,requirement", [(p, r) for p, rs in WHEELS.items() for r in rs])
def test_every_probe_reads_a_declared_value_on_real_wheels(package, requirement):
    reader = Reader(WheelSource(wheel(requirement)))
    results = {name: spec.run(reader) for name, spec in PROBES.items() if spec.package == package}
    undeclared = {n: r.reason for n, r in results.items() if isinstance(r, Unknown) and "undeclared" in r.reason}
    assert not undeclared
    assert any(isinstance(r, Reading) for r in results.values())
