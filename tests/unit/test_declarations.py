"""Every declaration is well-formed and composes with every subset that leaves one patch out."""

from __future__ import annotations

from pathlib import Path

import pytest

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
    assert committed == catalogue.render(), "run: python -m compat.catalogue > PATCHES.md"


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
