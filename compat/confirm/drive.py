"""One generator run: construct speculators' generator, run every call, compare each with the reference.

The scheduler is observed (``StepRecorder``), so each call reports how many prefill steps left a prompt
unfinished (chunked) instead of assuming it.  Never raises and never waits on a dead worker: the worker watch of
compat.confirm.supervise either interrupts the main thread or hands the report so far to ``on_death``.
"""

from __future__ import annotations

import gc
import inspect
import time
from pathlib import Path

from compat.confirm import compare as cmp
from compat.confirm import supervise
from compat.shared import tolerance
from compat.vllm_log import root_cause


class StepRecorder:
    """Wrap ``scheduler.schedule`` on the live generator: tokens per request per step.

    A step "chunks" a prompt when the request got tokens but its prompt is
    still not fully computed afterwards (vLLM's own ``is_prefill_chunk``).
    """

    def __init__(self, scheduler):
        self.scheduler, self.steps = scheduler, []
        original = scheduler.schedule

        def schedule(*args, **kwargs):
            out = original(*args, **kwargs)
            step = []
            for req_id, n in dict(out.num_scheduled_tokens).items():
                req = scheduler.requests.get(req_id)
                if req is None:
                    continue
                step.append((req_id, int(n), int(req.num_prompt_tokens), int(req.num_computed_tokens)))
            if step:
                self.steps.append(step)
            return out

        scheduler.schedule = schedule

    def take(self) -> dict:
        """Summary of the steps since the last call, then forget them."""
        steps, self.steps = self.steps, []
        partial = [(rid, n, prompt, done) for step in steps for rid, n, prompt, done in step if done < prompt]
        return {
            "steps": len(steps),
            "max_tokens_per_step": max((sum(n for _, n, _, _ in step) for step in steps), default=0),
            "chunked_prefill_steps": len(partial),
            "chunked_requests": len({rid for rid, *_ in partial}),
        }


def drive(gen_module, spec, reference, layers, say, log_path: Path, on_death=None) -> dict:
    """Run ``spec.calls`` on a new generator of ``gen_module`` under the worker watch; the run's document.

    ``on_death(doc)`` is called from the watch thread when a worker dies, with the document so far (error
    WorkerDied, fds back on the terminal), and must end the process; without it the main thread is interrupted
    and the death is reported when it returns.
    """
    out = {"ok": False, "stage": "init", "calls": [], "error": None, "dtype": spec.dtype}
    with supervise.EngineLog(log_path, echo=spec.verbose) as log:

        def died(death: dict) -> None:
            if on_death is None:
                import _thread

                _thread.interrupt_main()  # KeyboardInterrupt in _calls; its finally reads the death
                return
            doc = {"ok": False, "stage": out["stage"], "calls": [], "worker_death": death,
                   "error": supervise.death_error(death), "log": str(log_path)}
            try:
                log.restore()
                text = log.text()
                cause = root_cause(text)
                doc.update({**out, **doc, "calls": list(out["calls"]), "worker_log": supervise.error_lines(text),
                            "root_cause": str(cause) if cause else None})
            finally:
                on_death(doc)

        with supervise.WorkerWatch(died, grace_s=spec.death_grace_s) as watch:
            _calls(out, watch, gen_module, spec, reference, layers, lambda text: say(text, log.console))
    out["log"] = str(log_path)
    if out["error"] is not None:
        text = log.text()
        out["worker_log"] = supervise.error_lines(text)
        cause = root_cause(text)
        out["root_cause"] = str(cause) if cause else None
        out["killed_after_error"] = supervise.kill_engine_processes()  # nothing of a failed engine outlives the run
    return out


def _calls(out, watch, gen_module, spec, reference, layers, say) -> None:
    gen = None
    started = time.monotonic()
    kept = {}
    rtol, checks = spec.rtol, spec.checks
    try:
        cls = gen_module.VllmHiddenStatesGenerator
        params = inspect.signature(cls.__init__).parameters
        kwargs = dict(layer_ids=list(layers), max_model_len=512, tensor_parallel_size=1, dtype=spec.dtype)
        kwargs.update(spec.engine or {})
        out["max_num_batched_tokens_accepted"] = "max_num_batched_tokens" in params
        if spec.max_batched_tokens and out["max_num_batched_tokens_accepted"]:
            kwargs["max_num_batched_tokens"] = spec.max_batched_tokens
        say("starting the engine")
        gen = cls(spec.model, **kwargs)
        out["engine_start_s"] = round(time.monotonic() - started, 2)
        out["device_type"] = tolerance.device_type_of(gen)
        if rtol is None:  # the automatic bound: the reference, the requested dtype and the engine's device
            chosen = tolerance.choose(spec.dtype, out["device_type"], reference=spec.reference_kind)
            rtol = chosen.rtol
            out["precision"] = chosen.as_dict()
        out["block_size"] = gen.vllm_config.cache_config.block_size
        sched = gen.vllm_config.scheduler_config
        out["scheduler"] = {"max_num_batched_tokens": sched.max_num_batched_tokens,
                            "enable_chunked_prefill": bool(getattr(sched, "enable_chunked_prefill", False)),
                            "max_num_seqs": sched.max_num_seqs}
        recorder = StepRecorder(gen.scheduler)
        say(f"engine started in {out['engine_start_s']} s")
        out["stage"] = "generate"
        for index, prompts in enumerate(spec.calls, 1):
            t0 = time.monotonic()
            results = gen.generate(prompts)
            found = cmp.compare(results, prompts, reference, layers, rtol, spec.hidden_size,
                                tie=tolerance.routing_tie(spec.dtype))
            if checks and index - 1 in (0, checks.get("batch"), checks.get("repeat")) and results:
                at = cmp.BATCH_POSITION if index - 1 == checks.get("batch") else 0
                if at < len(results):
                    kept.setdefault(index - 1, cmp.states_of(results, at))
            call = {"n": len(prompts), "seconds": round(time.monotonic() - t0, 2), **recorder.take(), **found}
            for name, key, pick in (("max_abs_diff", "max_abs_diff", max), ("max_rel_diff", "rel_diff", max),
                                    ("max_nrms", "nrms", max), ("min_cos", "min_cos", min)):
                call[name] = pick((s[key] for s in found["layers"].values()), default=0.0 if pick is max else 1.0)
            call["problems"] = found["problems"][:20]
            call["not_looked_at"] = found.get("not_looked_at", [])[:20]
            out["calls"].append(call)
            say(f"call {index}/{len(spec.calls)} {_bar(index, len(spec.calls))} {len(prompts)} sequences, "
                f"{call['seconds']} s, {'ok' if not call['problems'] else 'WRONG'}")
        if checks:
            out["invariants"] = cmp.cross_checks(kept, checks, layers, rtol)
        out["ok"] = all(not c["problems"] for c in out["calls"]) and not (out.get("invariants") or {}).get("problems")
        out["stage"] = "compared"
        if spec.after is not None:
            out["runtime"] = spec.after(gen)
    except BaseException as exc:  # noqa: BLE001 - the report carries it
        out["error"] = supervise.error_report(exc)
    finally:
        death = watch.stop()  # before shutdown: shutdown ends the workers on purpose
        if death is not None:
            out["ok"], out["worker_death"] = False, death
            out["error"] = supervise.death_error(death, out["error"])
        if gen is not None and getattr(gen, "executor", None) is not None:
            out["shutdown_clean"] = supervise.bounded_shutdown(gen.executor)
            supervise.release_zmq()
        del gen
        gc.collect()
    out["seconds"] = round(time.monotonic() - started, 2)


def _bar(done: int, total: int, width: int = 12) -> str:
    filled = round(width * done / total) if total else width
    return "[" + "#" * filled + "." * (width - filled) + "]"
