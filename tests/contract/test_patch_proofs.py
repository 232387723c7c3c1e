"""b. Every needed patch, proven twice on real vLLM.

Left out (all other needed patches applied) its own upstream error text, or
its own kind of wrong hidden states, appears; with every patch applied the
generator runs and matches Hugging Face.  The table is the registry itself,
so a new declaration gets its proof without a new test.
"""

from __future__ import annotations

import pytest

from compat.registry import load_patches
from tests.contract.comparator import judge
from tests.contract.conftest import compat

pytestmark = pytest.mark.proof  # the slow half: one engine start per needed patch

PATCHES = {p.id: p for p in load_patches()}
SILENT = "wrong hidden states"


def _workers(run) -> list:
    return run["runtime"]["workers"]


def _sync_scheduling(run) -> bool:
    """Left to vLLM (the patch is out), the resolved async_scheduling is off in the engine and every worker."""
    return run["runtime"]["parent_async_scheduling"] is False and all(
        w["async_scheduling"] is False for w in _workers(run))


def _v1_runner(run) -> bool:
    """The workers really run a model runner that keeps input_batch (V1), not Model Runner V2."""
    return all(w["runner_has_input_batch"] and not w["use_v2_model_runner"] for w in _workers(run))


def _supports_eagle3(run) -> bool:
    """The model the workers loaded implements SupportsEagle3 itself (no wrapper)."""
    return all(w["supports_eagle3"] is True for w in _workers(run))


def _single_pipeline_stage(run) -> bool:
    """One pipeline stage in every worker, and the generator offers no way to ask for more."""
    return not run["runtime"]["generator_has_pipeline_parallel_size"] and all(
        w["pipeline_parallel_size"] == 1 for w in _workers(run))


def _workers_spawned(run) -> bool:
    """vLLM's CPU platform chose spawn itself, and the workers really are spawned children."""
    return run["runtime"]["worker_multiproc_method"] == "spawn" and all(w["spawned"] for w in _workers(run))


# Patches whose bug cannot show on this machine.  They are left out together in one
# run, which must still match HF; its live engine and workers must show the reason.
UNOBSERVABLE_ON_CPU = {
    "vllm.scheduler_config.async_scheduling_auto_on": (
        "vLLM's CPU platform resolves async_scheduling to False", _sync_scheduling),
    "vllm.runner.v2_has_no_input_batch": (
        "Model Runner V2 requires Triton, which this CPU lane lacks: the workers run V1", _v1_runner),
    "speculators.worker.pipeline_parallel_captures": (
        "the generator exposes no pipeline_parallel_size: one stage, nothing to lose", _single_pipeline_stage),
    "speculators.generator.kv_cache_config_per_rank": (
        "one pipeline stage: every rank holds every layer, one config fits all (PP=2: test_parallel.py)",
        _single_pipeline_stage),
    "platform.workers_spawned_after_cuda_touch": (
        "vLLM's CPU platform spawns its workers itself; only a fork after touching CUDA breaks", _workers_spawned),
    "speculators.worker.language_model_wrappers": (
        "the tiny Llama implements SupportsEagle3; the gate only bites wrapper models (Kimi-K2.5)",
        _supports_eagle3),
}


# On CUDA (the GPU lane) async scheduling resolves on; the cell's one-stage runs are right without its patch all the
# same, because its bug needs pipeline parallelism: test_parallel.py proves it at PP=2.
UNOBSERVABLE_ON_CUDA = {
    **UNOBSERVABLE_ON_CPU,
    "vllm.scheduler_config.async_scheduling_auto_on": (
        "one pipeline stage: its bug needs PP > 1 (test_parallel.py)", _single_pipeline_stage),
}

# Patches whose symptoms are the CPU platform's (and MLA's on Hopper): on CUDA with the dense tiny Llama, left out,
# the run must still be right (H200, vLLM 0.20: block_size 16 and torch.cuda.mem_get_info work there).
RIGHT_WITHOUT_ON_CUDA = {
    "platform.block_size_and_kv_memory": "CPU attention needs block_size % 32, MLA on Hopper 64, and no torch.cuda off-GPU",
}


def unobservable(engine_device: str) -> dict:
    return UNOBSERVABLE_ON_CPU if engine_device == "cpu" else UNOBSERVABLE_ON_CUDA


# Patches whose bug is a cost, not a wrong result: their leave-one-out run still matches HF, so the symptom is
# observed by their own contract test (the live worker's threads and cores), named here.
PROVEN_ELSEWHERE = {
    "platform.cpu_workers_bind_every_core": "tests/contract/test_thread_binding.py",
    "speculators.generator.quiet_del_at_exit": "tests/contract/test_generator_exit.py",  # shows at interpreter exit
}


def _chunked(run) -> bool:
    return any(c["chunked_prefill_steps"] > 0 for c in run["calls"])


# The mechanism a silent symptom depends on, observed in the left-out run.
MECHANISM = {
    "speculators.generator.no_chunked_prefill": ("the scheduler split a prompt across steps", _chunked),
}


def _needed(surface):
    from compat.registry import select

    return [d for d in select(surface) if d.verdict == "needed"]


def _assert_symptom(patch, run, model, device):
    if patch.symptoms[0].startswith(SILENT):
        assert run["error"] is None, f"expected silently wrong output, got an error: {run['error']}"
        problems = [p for c in run["calls"] for p in c["problems"]]
        assert problems, f"without {patch.id} the hidden states still matched HF"
        wrong = [v.problems[:3] for v in judge(run["captures"], model, device) if not v.ok]  # tests/contract/comparator.py
        assert wrong, f"without {patch.id} the independent comparator finds every captured call right"
    else:
        assert run["error"] is not None, f"without {patch.id} the generator ran: {run['calls']}"
        text = run["error"]["message"] + run["error"]["traceback"] + run.get("worker_log", "")
        assert any(s in text for s in patch.symptoms), (
            f"expected one of {patch.symptoms!r}, got:\n{run['error']['traceback']}\n{run.get('worker_log', '')[-2000:]}"
        )


def _assert_shared_engine_fixed(patch, run):
    """A proof run on the patched run's engine (its edits lie only in generate()): that engine was idle before,
    and right after, the full set's generate() on the same calls matched HF on it."""
    if not run.get("shared_engine"):
        return
    assert run["unfinished_before"] == 0, f"without {patch.id}: the shared engine held requests before the run"
    after = run["full_set_after"]
    assert after["ok"] and after["error"] is None, f"with {patch.id} back, on the same engine: {after}"


def _together_run(runs):
    return next((run for run in runs.values() if len(run.get("left_out", ())) > 1 or
                 (run.get("left_out") and run["left_out"][0] in UNOBSERVABLE_ON_CPU)), None)


def test_every_needed_patch_is_proven(surface, proofs_report, engine_device, tiny_model):
    needed = _needed(surface)
    assert needed, "this lane needs no patch at all?"
    runs = proofs_report["runs"]
    right_without = {**PROVEN_ELSEWHERE, **(RIGHT_WITHOUT_ON_CUDA if engine_device != "cpu" else {})}
    failures = []
    for decision in needed:
        patch = decision.patch
        if patch.id in UNOBSERVABLE_ON_CPU:
            continue
        if patch.id in right_without:  # left out it must still be right; its bug is proven elsewhere
            run = runs.get(patch.id)
            if run is not None and (run.get("error") or any(c["problems"] for c in run.get("calls", []))):
                failures.append(f"{patch.id}: left out, the run broke: {run.get('error') or run['calls']}")
            continue
        try:
            _assert_symptom(patch, runs[patch.id], tiny_model, engine_device)
            if patch.id in MECHANISM:
                what, seen = MECHANISM[patch.id]
                assert seen(runs[patch.id]), f"without {patch.id}: not observed that {what}"
            _assert_shared_engine_fixed(patch, runs[patch.id])
        except (AssertionError, KeyError) as exc:
            failures.append(f"{patch.id}: {type(exc).__name__}: {exc}")
    assert not failures, "\n\n".join(failures)


def test_unobservable_patches_are_left_out_and_their_reasons_observed(surface, proofs_report, engine_device):
    """Without them (together) the generator still matches HF, and the live engine shows why."""
    reasons = unobservable(engine_device)
    left_out = [d.patch.id for d in _needed(surface) if d.patch.id in reasons]
    if not left_out:
        pytest.skip("no patch that cannot show on this CPU is needed here")
    run = _together_run(proofs_report["runs"])
    assert run is not None and sorted(run["left_out"]) == sorted(left_out), proofs_report["runs"].keys()
    assert run["error"] is None and run["ok"], run["error"] or [c["problems"] for c in run["calls"]]
    failures = [f"{pid}: the reason it cannot show here is gone: {reasons[pid][0]}; saw {run['runtime']}"
                for pid in left_out if not reasons[pid][1](run)]
    assert not failures, "\n".join(failures)


def test_each_proof_imported_the_variant_the_kit_wrote(proofs_report):
    """The proofs run side by side, each importing what the kit wrote with ``--exclude`` from a copy beside the
    install (``variants.snapshot``): the driver, and every worker of a run that got as far as observing
    them (the spawned ones included), imported speculators from that copy, never the installed full set."""
    seen = {key: run["speculators_from"] for key, run in proofs_report["runs"].items() if run.get("speculators_from")}
    assert any(where["workers"] for where in seen.values()), proofs_report["runs"].keys()
    for key, where in seen.items():
        files = [where["driver"], *(where["workers"] or [])]
        strays = [f for f in files if not str(f).startswith(where["variant"] + "/")]
        assert not strays, f"{key}: speculators imported from {strays}, not from its variant {where['variant']}"


def test_proofs_leave_the_full_patch_set_installed(proofs_report):
    assert compat("--verify").returncode == 0
