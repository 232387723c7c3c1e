"""b. Every needed patch, proven twice on real vLLM.

Left out (all other needed patches applied) its own upstream error text, or
its own kind of wrong hidden states, appears; with every patch applied the
generator runs and matches Hugging Face.  The table is the registry itself,
so a new declaration gets its proof without a new test.
"""

from __future__ import annotations

import pytest

from compat.astkit import Reader
from compat.registry import load_patches
from tests.contract.conftest import compat

pytestmark = pytest.mark.proof  # the slow half: one engine start per needed patch

PATCHES = {p.id: p for p in load_patches()}
SILENT = "wrong hidden states"


def _cpu_forces_sync_scheduling(vllm_source) -> bool:
    text = Reader(vllm_source).text("vllm/platforms/cpu.py") or ""
    return "async_scheduling = False" in text


def _v2_needs_triton(vllm_source) -> bool:
    text = Reader(vllm_source).text("vllm/config/vllm.py") or ""
    from vllm.triton_utils import HAS_TRITON  # False here: "0 active driver(s) found"

    return "requires Triton" in text and not HAS_TRITON


def _llama_supports_eagle3(vllm_source) -> bool:
    from compat import astkit

    tree = Reader(vllm_source).module("vllm/model_executor/models/llama.py")
    cls = tree and astkit.find_class(tree, "LlamaForCausalLM")
    return bool(cls) and any("SupportsEagle3" in ast_unparse(b) for b in cls.bases)


def _single_pipeline_stage(_vllm_source) -> bool:
    import inspect

    from speculators.data_generation.vllm_hidden_states_generator import VllmHiddenStatesGenerator

    return "pipeline_parallel_size" not in inspect.signature(VllmHiddenStatesGenerator.__init__).parameters


def ast_unparse(node) -> str:
    import ast

    return ast.unparse(node)


# Patches whose bug cannot show on this machine, each with a claim the test checks.
UNOBSERVABLE_ON_CPU = {
    "vllm.scheduler_config.async_scheduling_auto_on": (
        "vLLM's CPU platform forces async_scheduling=False", _cpu_forces_sync_scheduling),
    "vllm.runner.v2_has_no_input_batch": (
        "Model Runner V2 requires Triton, which this CPU lane lacks", _v2_needs_triton),
    "speculators.worker.pipeline_parallel_captures": (
        "the generator exposes no pipeline_parallel_size: one stage, nothing to lose", _single_pipeline_stage),
    "speculators.worker.language_model_wrappers": (
        "the tiny Llama implements SupportsEagle3; the gate only bites wrapper models (Kimi-K2.5)",
        _llama_supports_eagle3),
}


def _needed(surface):
    from compat.registry import select

    return [d for d in select(surface) if d.verdict == "needed"]


def _assert_symptom(patch, run):
    if patch.symptoms[0].startswith(SILENT):
        assert run["error"] is None, f"expected silently wrong output, got an error: {run['error']}"
        problems = [p for c in run["calls"] for p in c["problems"]]
        assert problems, f"without {patch.id} the hidden states still matched HF"
    else:
        assert run["error"] is not None, f"without {patch.id} the generator ran: {run['calls']}"
        text = run["error"]["message"] + run["error"]["traceback"] + run.get("worker_log", "")
        assert any(s in text for s in patch.symptoms), (
            f"expected one of {patch.symptoms!r}, got:\n{run['error']['traceback']}\n{run.get('worker_log', '')[-2000:]}"
        )


def test_every_needed_patch_is_proven(surface, proofs_report, vllm_installed, tiny_model, tmp_path):
    needed = _needed(surface)
    assert needed, "this lane needs no patch at all?"
    runs = proofs_report["runs"]
    failures = []
    for decision in needed:
        patch = decision.patch
        if patch.id in UNOBSERVABLE_ON_CPU:
            reason, check = UNOBSERVABLE_ON_CPU[patch.id]
            if not check(vllm_installed["vllm"][1]):
                failures.append(f"{patch.id}: the reason it cannot show here is gone: {reason}")
            continue
        try:
            _assert_symptom(patch, runs[patch.id])
        except AssertionError as exc:
            failures.append(f"{patch.id}: {exc}")
    assert not failures, "\n\n".join(failures)


def test_proofs_leave_the_full_patch_set_installed(proofs_report):
    assert compat("--verify").returncode == 0
