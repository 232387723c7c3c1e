"""Every declaration is well-formed and composes with every subset that leaves one patch out."""

from __future__ import annotations

from pathlib import Path

import pytest

from ci import catalogue_page
from ci.proofs import serve_proofs
from compat import catalogue
from compat.registry import load_patches, validate
from fixtures.synthetic import wheel_files
from fixtures.wheels import wheel

ROOT = Path(__file__).resolve().parents[2]
RELEASES = {"0.3.0": "0.3.0", "0.4.x": "0.4.0.1"}
PATCHES = load_patches()


@pytest.fixture(scope="module")
def pristine():
    return {variant: wheel_files(wheel(f"speculators=={version}")) for variant, version in RELEASES.items()}


def compose(files: dict[str, bytes], variant: str, patches) -> dict[str, str]:
    out = {}
    for relpath in {f for p in patches for f in p.files(variant)}:
        text = files[relpath].decode()
        for patch in patches:
            for edit in patch.edits.get(variant, {}).get(relpath, ()):
                text = edit.apply(text, patch.id)
        compile(text, relpath, "exec")
        out[relpath] = text
    return out


@pytest.mark.parametrize("patch", PATCHES, ids=lambda p: p.id)
def test_declaration_is_complete(patch):
    validate(patch)
    assert patch.symptom, "say what a user sees without the patch"
    assert set(patch.edits) <= set(RELEASES)


@pytest.mark.parametrize(
    "patch,variant", [(p, v) for p in PATCHES for v in sorted(p.edits)], ids=lambda x: getattr(x, "id", x)
)
def test_patch_composes_alone_and_when_left_out(pristine, variant, patch):
    others = [p for p in PATCHES if p is not patch]
    compose(pristine[variant], variant, [patch])
    without = compose(pristine[variant], variant, others)
    full = compose(pristine[variant], variant, PATCHES)
    for relpath in patch.files(variant):
        for edit in patch.edits[variant][relpath]:
            assert edit.marker in full[relpath]
            if relpath in without:
                assert edit.marker not in without[relpath]


def test_catalogue_is_generated_and_current():
    committed = (ROOT / "PATCHES.md").read_text()
    assert committed == catalogue_page.render(), "run: python -m ci catalogue"


SERVE = load_patches("serve")


@pytest.mark.parametrize("patch", SERVE, ids=lambda p: p.id)
def test_catalogue_lists_every_serve_declaration(patch):
    """PATCHES.md, --brief and --json carry each serve declaration with its own fields, after the old path's."""
    full = catalogue_page.render()
    section = full[full.index("# Modern path"):]
    entry = section[section.index(f"## `{patch.id}`"):]
    entry = entry[:entry.index("\n## ", 1)] if "\n## " in entry[1:] else entry
    for text in (patch.why, patch.how, patch.upstream, patch.removal, f"**Target.** `{patch.target}`",
                 *patch.symptoms, catalogue.needed_when(patch), serve_proofs.status(patch)):
        assert text in entry, text
    assert f"| `{patch.id}` | {patch.title} | {patch.target} |" in section
    brief = catalogue.render_brief(catalogue_page.view()).splitlines()
    serve_rows = brief[brief.index(next(line for line in brief if "FIXES (modern path" in line)):]
    assert any(line.split()[:2] == [patch.id, patch.target] and line.endswith(patch.title) for line in serve_rows)
    listed = {p["id"]: p for p in catalogue.as_json(catalogue_page.view())["serve_patches"]}
    assert listed[patch.id]["target"] == patch.target and listed[patch.id]["proof"] == catalogue_page.status(patch)


def test_the_shipped_catalogue_reads_nothing_of_the_repository():
    """The wheel ships the product: the kit's proof words come from the evidence shipped in the package, so neither
    module names a path of the repository's tests/ or docs/ (their reading lives in ci.proofs.serve_proofs)."""
    from compat.serve import proofs as shipped

    for name in ("found", "contract_proof", "unit_proofs", "serve_records", "outcome_in", "module_key", "ROOT"):
        assert not hasattr(shipped, name), name
    assert not hasattr(catalogue, "saved_pairs") and not hasattr(catalogue, "ROOT")
    for module in (shipped, catalogue):
        source = Path(module.__file__).read_text()
        assert not [s for s in ('"tests"', "tests/", "docs/") if s in source], module.__name__


def test_a_kit_without_the_repository_prints_the_shipped_proof_status(tmp_path):
    """``python -m compat.catalogue --json`` in a copy of the package with no tests/ or docs/ beside it: each serve
    patch's proof is the shipped evidence's words, with no saved halves."""
    import json
    import shutil
    import subprocess
    import sys

    from compat.serve import proofs as shipped

    junk = shutil.ignore_patterns("__pycache__")
    for folder in ("compat", "patches"):
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=junk)
    run = [sys.executable, "-m", "compat.catalogue"]
    proc = subprocess.run([*run, "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    listed = {p["id"]: p for p in json.loads(proc.stdout)["serve_patches"]}
    assert set(listed) == {p.id for p in SERVE}
    for patch in SERVE:
        assert listed[patch.id]["proof"] == shipped.status(patch) and listed[patch.id]["saved_proofs"] == []
    page = subprocess.run(run, cwd=tmp_path, capture_output=True, text=True, timeout=120).stdout
    assert "the evidence shipped with this kit" in page and "tests/contract/serve/test_k" not in page


def test_serve_proof_status_reads_the_repository(tmp_path):
    """A proof module by the kN convention, its outcome per serve record; unit proofs by the id they name; no
    tests/ beside the kit (installed): the evidence shipped in the package, never a guess."""
    import json

    k1 = next(p for p in SERVE if p.id == "vllm.serve.cpu_connector")
    fp8 = next(p for p in SERVE if p.id == "speculators.serve.validate_fp8")
    assert "compat/proof_evidence.py" in serve_proofs.status(k1, tmp_path)
    (tmp_path / "tests/contract/serve").mkdir(parents=True)
    assert serve_proofs.status(k1, tmp_path).startswith("none yet")
    (tmp_path / "tests/contract/serve/test_k1_proof.py").write_text("")
    assert "in no serve cell's record yet" in serve_proofs.status(k1, tmp_path)
    assert serve_proofs.brief(k1, tmp_path) == "serve: not run"
    records = tmp_path / "docs/coverage/records"
    records.mkdir(parents=True)
    proof = "tests/contract/serve/test_k1_proof.py::test_without_k1"
    for name, vllm, outcome, path in (("a", "0.25.0", "passed", "serve"), ("b", "0.32.0", "failed", "serve"),
                                      ("c", "0.32.0", "passed", "old")):
        (records / f"{name}.json").write_text(json.dumps({"name": name, "path": path, "versions": {"vllm": vllm},
                                                          "tests": [{"test": proof, "outcome": outcome}]}))
    said = serve_proofs.status(k1, tmp_path)
    assert "passed in `a` (vLLM 0.25.0)" in said and "failed in `b` (vLLM 0.32.0)" in said and "`c`" not in said
    assert serve_proofs.brief(k1, tmp_path) == "serve: failed"
    (tmp_path / "tests/unit").mkdir()
    (tmp_path / serve_proofs.UNIT).write_text(f"def test_x():\n    pid = {fp8.id!r}\n\ndef test_y():\n    pass\n")
    assert serve_proofs.unit_proofs(fp8, tmp_path) == [f"{serve_proofs.UNIT}::test_x"]
    assert serve_proofs.brief(fp8, tmp_path) == "released file"


def test_pipeline_stage_merge_keeps_layer_order(pristine):
    """The PP patch's merge, exercised on its own (PP > 1 cannot run on this CPU)."""
    import ast

    patch = next(p for p in PATCHES if p.id == "speculators.worker.pipeline_parallel_captures")
    text = compose(pristine["0.4.x"], "0.4.x", [patch])["speculators/data_generation/vllm_hidden_states_generator.py"]
    fn = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == "_merge_stage_captures")
    namespace: dict = {}
    exec(compile(ast.Module([fn], []), "merge", "exec"), namespace)  # noqa: S102
    merge = namespace["_merge_stage_captures"]
    # world of TP=2 x PP=2: ranks 0,2 are TP-rank-0 of stages 0 and 1
    replies = [{"a": ["L1"], "b": ["L1b"]}, None, {"a": ["L3"], "b": ["L3b"]}, None]
    assert merge(replies) == {"a": ["L1", "L3"], "b": ["L1b", "L3b"]}
    assert merge([None, None]) is None


def _per_rank_helpers(pristine, variant: str, planner):
    """p35's two helpers, compiled from the patched generator text, with ``planner`` as vLLM's planner."""
    import ast

    patch = next(p for p in PATCHES if p.id == "speculators.generator.kv_cache_config_per_rank")
    text = compose(pristine[variant], variant, [patch])["speculators/data_generation/vllm_hidden_states_generator.py"]
    wanted = {"_merged_kv_cache_spec", "_kv_cache_configs_per_rank"}
    fns = [n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    namespace: dict = {"get_kv_cache_config_from_groups": planner}
    exec(compile(ast.Module(fns, []), "per_rank", "exec"), namespace)  # noqa: S102
    return namespace["_merged_kv_cache_spec"], namespace["_kv_cache_configs_per_rank"]


@pytest.mark.parametrize("variant,old_planner", [("0.4.x", False), ("0.3.0", False), ("0.3.0", True)])
def test_kv_cache_config_per_rank(pristine, variant, old_planner):
    """p35 on its own: one config per rank from the layers that rank holds, every rank at the smallest block
    count (through the planner's own override), the scheduler a copy of rank 0's; one stage: unchanged."""
    from dataclasses import dataclass, field
    from types import SimpleNamespace

    @dataclass
    class Group:
        layer_names: list
        kv_cache_spec: str

    @dataclass
    class Config:
        num_blocks: int
        kv_cache_tensors: list
        kv_cache_groups: list = field(default_factory=list)

    calls = []

    def planner(vllm_config, kv_cache_groups, available_memory, **extra):  # 1 byte per layer per block
        calls.append(extra)
        layers = [n for g in kv_cache_groups for n in g.layer_names]
        blocks = vllm_config.cache_config.num_gpu_blocks_override or available_memory // len(layers)
        return Config(blocks, [(n, blocks) for n in layers], kv_cache_groups)

    if old_planner:  # vLLM < 0.12 also takes the layers' specs
        def old(vllm_config, kv_cache_groups, kv_cache_specs, available_memory):
            return planner(vllm_config, kv_cache_groups, available_memory, kv_cache_specs=kv_cache_specs)
        merge, per_rank = _per_rank_helpers(pristine, variant, old)
    else:
        merge, per_rank = _per_rank_helpers(pristine, variant, planner)
    vllm_config = SimpleNamespace(cache_config=SimpleNamespace(num_gpu_blocks_override=None))
    # PP=2 x TP=1, 5 layers split 3 / 2: stage 1 could hold 60 blocks, stage 0 only 40
    specs = [{"l0": "full", "l1": "full", "l2": "full"}, {"l3": "full", "l4": "full"}]
    merged = merge(specs)
    assert list(merged) == ["l0", "l1", "l2", "l3", "l4"]
    groups = [Group(list(merged), "full")]
    whole = planner(vllm_config, groups, 120)
    scheduler, configs = per_rank(vllm_config, whole, groups, merged, specs, 120)
    assert [c.num_blocks for c in configs] == [40, 40] and scheduler.num_blocks == 40
    assert [[n for n, _ in c.kv_cache_tensors] for c in configs] == [["l0", "l1", "l2"], ["l3", "l4"]]
    assert [c.kv_cache_groups[0].layer_names for c in configs] == [["l0", "l1", "l2"], ["l3", "l4"]]
    assert scheduler is not configs[0] and scheduler.kv_cache_groups[0].layer_names == ["l0", "l1", "l2"]
    assert vllm_config.cache_config.num_gpu_blocks_override is None  # restored
    if old_planner:
        assert calls[-1] == {"kv_cache_specs": {"l3": "full", "l4": "full"}}
    # one stage (TP=2): the generator's single config for both ranks, as before
    tp = [{"l0": "full", "l1": "full"}, {"l0": "full", "l1": "full"}]
    one = planner(vllm_config, [Group(["l0", "l1"], "full")], 100)
    assert per_rank(vllm_config, one, [Group(["l0", "l1"], "full")], merge(tp), tp, 100) == (one, [one, one])
    with pytest.raises(ValueError, match="differ across workers"):
        merge([{"l0": "full"}, {"l0": "sliding"}])
