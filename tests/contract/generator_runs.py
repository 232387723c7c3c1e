"""One generator run: speculators' real generator on real vLLM through compat confirm's own run (every captured
layer against the reference), its vLLM output in the run's own log, the raw captures of its calls saved for the
tests' independent comparator (tests/contract/comparator.py), optionally observed while the engine lives.

Also the shared-engine proofs: a variant whose edits lie only in ``generate()`` drives the patched run's live
engine, then the full set runs the same calls on it and must match the reference.
"""

from __future__ import annotations

import os
import sys
import time
import types
from pathlib import Path

from tests.contract import confirm_api


class ReferenceInEachChild:
    """The reference ``(model, refs, depth)``, computed in the process that first reads it: on CUDA, each forked
    child.

    A child forked from a process that ran an HF model on CPU gets "CUDA error: initialization error" at its first
    CUDA tensor (ci/gpu/fork_probe.py on an H200, docs/gpu/fork_probe.json ``hf_cpu_model``), and the
    generator's driver receives the workers' captures as CUDA tensors; so on CUDA the harness never runs HF before
    it forks.  (On CPU the harness computes it once, before every fork.)
    """

    def __init__(self, settings, prompts, layers):
        self.settings, self.args, self.pid, self.value = settings, (prompts, layers), None, None

    def _get(self):
        if self.pid != os.getpid():
            self.value, self.pid = self.settings.hf_reference(*self.args), os.getpid()
        return self.value

    def __iter__(self):
        return iter(self._get())

    def __getitem__(self, index):
        return self._get()[index]

    def __len__(self):
        return 3


# -- the raw captures, for the independent comparator ------------------------------

#: a call of at most this many prompts is captured whole; a larger one at ``CAPTURED_POSITIONS`` of it
WHOLE_CALL = 11


def captured_positions(n: int) -> list[int]:
    if n <= WHOLE_CALL:
        return list(range(n))
    return sorted({0, n // 4, n // 2, (3 * n) // 4, n - 1})


def save_captures(path: Path, index: int, prompts, results, layers) -> None:
    """Add call ``index``'s raw captures (the prompt asked at each kept position, and the tensors the generator
    returned there) to ``path``; the file is rewritten after every call, so a run that dies keeps what it had."""
    import torch

    doc = torch.load(path, weights_only=False) if path.exists() else {"layers": list(layers), "calls": []}
    kept = [i for i in captured_positions(len(prompts)) if i < len(results)]
    doc["calls"].append({
        "index": index, "n": len(prompts), "positions": kept, "prompts": [list(prompts[i]) for i in kept],
        "states": [[t.detach().cpu() for t in results[i]["hidden_states"]] for i in kept],
    })
    torch.save(doc, path)


def capturing(gen_module, path: Path, layers):
    """A stand-in for the generator module whose class saves the raw captures of every call it makes."""
    base = gen_module.VllmHiddenStatesGenerator
    counter = [0]

    class Capturing(base):
        _harness_uncaptured = base  # what drives the engine without adding to this run's captures

        def generate(self, prompts, *args, **kwargs):
            results = super().generate(prompts, *args, **kwargs)
            save_captures(path, counter[0], prompts, results, layers)
            counter[0] += 1
            return results

    Capturing.__name__, Capturing.__qualname__ = base.__name__, base.__qualname__
    return types.SimpleNamespace(VllmHiddenStatesGenerator=Capturing, __name__=gen_module.__name__)


# -- how vLLM starts the worker ----------------------------------------------------


def _start_method(method: str) -> None:
    """vLLM's worker start method for the next executor; vLLM caches its environment after an engine start."""
    os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = method
    envs = sys.modules.get("vllm.envs")
    if envs is not None and hasattr(envs, "disable_envs_cache"):
        envs.disable_envs_cache()


def with_workers(gen_module, method: str, on_cpu: bool) -> None:
    """Make the generator module's MultiprocExecutor start its workers with ``method`` ("fork": from this process,
    which has vLLM, torch and the generator's modules imported already, a worker ready in ~2 s instead of ~10 s
    of spawned imports; "spawn").

    vLLM's CPU platform sets VLLM_WORKER_MULTIPROC_METHOD=spawn while the generator builds its VllmConfig,
    right before the executor; this subclass sets the method in between.
    """
    base = getattr(gen_module, "MultiprocExecutor", None)
    if base is None:
        return
    base = getattr(base, "_harness_base", base)
    if method == "fork" and not on_cpu:
        # a GPU worker forked from here fails CUDA's init ("CUDA error: initialization error", H200, vLLM 0.20):
        # this process imported vLLM's CUDA platform; vLLM itself spawns then
        method = "spawn"

    class Executor(base):
        _harness_base = base

        def __init__(self, *args, **kwargs):
            _start_method(method)
            super().__init__(*args, **kwargs)

    Executor.__name__, Executor.__qualname__ = base.__name__, base.__qualname__
    gen_module.MultiprocExecutor = Executor


# -- the run ---------------------------------------------------------------------


def run(settings, gen_module, calls, reference, layers, files, after=None, dtype="float32", workers=None) -> dict:
    """compat confirm's run (every captured layer vs the reference) with this run's own ``files`` (``log``,
    ``captures``), optionally observing the live engine (``after(gen)``).

    ``workers``: how vLLM's MultiprocExecutor starts the worker (None: as vLLM's platform chooses; "fork" or
    "spawn": ``with_workers``).  Either way it is the generator's own executor class, a separate process behind
    vLLM's message queues."""
    if workers is not None:
        with_workers(gen_module, workers, settings.on_cpu)
    if settings.wrap is not None:
        gen_module = settings.wrap(gen_module)
    out = confirm_api.run_generator(capturing(gen_module, files.captures, layers), settings.model, calls, reference,
                                    layers, settings.max_batched, after=after, dtype=dtype, log_path=files.log,
                                    rtol=settings.rtol, engine=settings.gpu_share_engine())
    out["workers"] = workers
    out["captures"] = str(files.captures) if files.captures.exists() else None
    if settings.facts is not None:
        out.update(settings.facts())
    return out


def forked_after_cuda_touch(run_doc) -> str | None:
    """In a child of the harness: "cuda-touched" when the run failed only because this process was forked from
    one that had asked torch about CUDA (a CUDA build of torch, as PyPI's; vLLM's platform detection asks), so
    any CUDA call the generator makes refuses to run here; the harness then runs that variant in a new
    interpreter.  None otherwise."""
    import torch

    error = run_doc.get("error") or {}
    text = (error.get("message") or "") + (error.get("traceback") or "")
    bad_fork = getattr(torch.cuda, "_is_in_bad_fork", lambda: False)()
    return "cuda-touched" if bad_fork and "Cannot re-initialize CUDA in forked subprocess" in text else None


# -- variants on the patched run's live engine -------------------------------------


def _drive(settings, gen, cls, calls, reference, layers, recorder, captures: Path | None) -> dict:
    """Run ``calls`` on the live engine with ``cls``'s methods; compare each with the reference (as compat
    confirm does); the raw captures go to ``captures``."""
    out = {"ok": False, "stage": "generate", "calls": [], "error": None}
    home = gen.__class__
    recorder.take()
    try:
        gen.__class__ = cls
        for index, prompts in enumerate(calls):
            t0 = time.monotonic()
            results = gen.generate(prompts)
            if captures is not None:
                save_captures(captures, index, prompts, results, layers)
            found = confirm_api.compare(results, prompts, reference, layers, rtol=settings.rtol)
            call = {"n": len(prompts), "seconds": round(time.monotonic() - t0, 2), **recorder.take(), **found}
            call["problems"] = found["problems"][:20]
            out["calls"].append(call)
        out["ok"] = all(not c["problems"] for c in out["calls"])
        out["stage"] = "compared"
    except Exception as exc:  # noqa: BLE001 - the proof reads it; a dead worker still ends the whole run
        out["error"] = confirm_api.error_report(exc)
    finally:
        gen.__class__ = home
        _settle(gen)
    return out


def _settle(gen) -> None:
    """Whatever a failed variant left is cleared: its requests aborted, a step it executed without sampling
    sampled (vLLM >= 0.11.1 refuses the next step otherwise), the captures reset.  The full set's run that
    follows on the same engine is what shows the engine healthy again."""
    from vllm.v1.request import RequestStatus

    left = list(getattr(gen.scheduler, "requests", {}))
    if left:
        gen.scheduler.finish_requests(left, RequestStatus.FINISHED_ABORTED)
    if hasattr(gen.executor, "sample_tokens"):
        try:
            gen.executor.sample_tokens(None)  # nothing pending: an empty output
        except Exception:  # noqa: BLE001, S110 - the full set's run after it judges the engine
            pass
    gen.executor.collective_rpc("_reset_capture")


def shared_proofs(settings, gen, variants, calls, reference, layers, log: Path, captures_of) -> tuple[dict, list]:
    """Leave each patch of ``variants`` (its id -> the generator module's source the kit wrote without it, whose
    edits lie only in generate()) out on this live engine; those the engine cannot vouch for are returned.

    Each variant's generate() drives the engine, then the full set's generate() runs the same calls and must
    match the reference: the engine is healthy and the patch is what fixes it.  When that full-set run fails,
    this variant and every later one get their own engine.  This process alone writes ``log`` (the patched
    run's own), so what a variant's workers said is read from where the log stood when it began.
    """
    from tests.contract.variants import load_variant

    runs, rest = {}, []
    recorder = confirm_api.StepRecorder(gen.scheduler)
    full_cls = getattr(gen.__class__, "_harness_uncaptured", gen.__class__)  # the run's own captures stay its own
    pids = list(variants)
    for pid in pids:
        started = time.monotonic()
        offset = log.stat().st_size if log.exists() else 0
        idle = gen.scheduler.get_num_unfinished_requests()
        captures = captures_of(pid)
        run_doc = _drive(settings, gen, load_variant(pid, variants[pid]).VllmHiddenStatesGenerator, calls,
                         reference, layers, recorder, captures)
        if run_doc["error"] is not None and log.exists():
            run_doc["worker_log"] = confirm_api.log_tail_errors(log, offset)
        after = _drive(settings, gen, full_cls, calls, reference, layers, recorder, None)
        run_doc.update(left_out=[pid], dtype="float32", shared_engine=True, unfinished_before=idle,
                       seconds=round(time.monotonic() - started, 2), engine_log=str(log),
                       captures=str(captures) if captures.exists() else None,
                       full_set_after={"ok": after["ok"] and after["error"] is None, "error": after["error"],
                                       "problems": [p for c in after["calls"] for p in c["problems"]][:20]})
        if idle == 0 and run_doc["full_set_after"]["ok"]:
            runs[pid] = run_doc
        else:  # the shared engine cannot vouch for this one, nor for what follows: each gets its own
            rest += pids[pids.index(pid):]
            break
    return runs, rest
