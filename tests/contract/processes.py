"""Processes of the harness: a child forked from it, and a new interpreter, each with its own output file and
its own result file (never a pipe or a log shared with a neighbour), waited for with a limit, killed as a tree.

The harness imports vLLM, torch and transformers once and never speculators: a forked child imports speculators
fresh, as a new interpreter would, without paying vLLM's import again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

#: exit codes of the children already reaped (``wait`` may be asked again about one)
_REAPED: dict = {}
#: the new interpreters started here, kept alive so that subprocess never reaps them behind ``wait``'s back
_STARTED: dict = {}


@dataclass(frozen=True)
class Child:
    """A started process: its pid, the file its fds 1 and 2 write to, the file its result is written to."""

    pid: int
    output: Path
    result: Path | None
    started: float


def header(path: Path, name: str) -> None:
    """The first line of every run's own files: which run, which process (a file shared by two runs shows two)."""
    with open(path, "a") as handle:
        handle.write(f"== harness run {name} (pid {os.getpid()})\n")


def fork(target, output: Path, result: Path | None = None, name: str | None = None) -> Child:
    """Fork a child whose fds 1 and 2 go to ``output`` and that runs ``target()``.

    With ``result``: ``target()`` returns a JSON-able dict, written to ``result`` (an exception becomes
    ``{"ok": False, "stage": "child", ...}``); without: it returns the exit code (a command line's main())."""
    from tests.contract.confirm_api import error_report, exit_now

    output = Path(output)
    if name is not None:
        header(output, name)
    output.touch()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    started = time.monotonic()
    pid = os.fork()
    if pid != 0:
        return Child(pid, output, result, started)
    code = 70
    try:  # the child: never returns
        fd = os.open(output, os.O_WRONLY | os.O_APPEND)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        if result is None:
            code = target()
        else:
            try:
                doc = target()
            except BaseException as exc:  # noqa: BLE001 - the caller's report carries it
                doc = {"ok": False, "stage": "child", "calls": [], "error": error_report(exc)}
            Path(f"{result}.tmp").write_text(json.dumps(doc, default=str))
            os.replace(f"{result}.tmp", result)
            code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001
        import traceback

        traceback.print_exc()
    finally:
        exit_now(code if isinstance(code, int) else 1)


def wait(pid: int, limit_s: float):
    """The child's exit code (negative: a signal), or None when it is still running after ``limit_s``."""
    deadline = time.monotonic() + limit_s
    while True:
        if pid in _REAPED:
            return _REAPED[pid]
        if pid in _STARTED:
            if _STARTED[pid].poll() is not None:
                _REAPED[pid] = _STARTED.pop(pid).returncode
                return _REAPED[pid]
        else:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                _REAPED[pid] = os.waitstatus_to_exitcode(status)
                return _REAPED[pid]
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)


def kill_tree(pid: int) -> None:
    import psutil

    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for proc in procs:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass


def finish(child: Child, limit_s: float = 900) -> tuple[int | None, bool]:
    """Wait for ``child``; one that outlives ``limit_s`` is killed with its tree.  Returns (exit code, hung)."""
    code = wait(child.pid, limit_s)
    if code is None:
        kill_tree(child.pid)
        return wait(child.pid, 30), True
    return code, False


def result_of(child: Child, limit_s: float = 900) -> dict:
    """The dict a ``fork(..., result=...)`` child wrote, once it ended; its output's tail when it wrote none."""
    code, hung = finish(child, limit_s)
    if child.result is not None and child.result.exists():
        return json.loads(child.result.read_text())
    tail = child.output.read_text(errors="replace")[-6000:]
    return {"ok": False, "stage": "child", "calls": [],
            "error": {"type": "ChildDied", "message": f"harness child {child.pid} ended with {code}"
                      + (" after its time limit" if hung else ""), "traceback": tail}}


def interpreter(argv: list[str], output: Path, result: Path, root: str) -> Child:
    """``python ARGV`` in a new interpreter from ``root``, the checkout first on PYTHONPATH, its output in
    ``output``; it writes ``result`` itself."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (root, os.environ.get("PYTHONPATH"))))}
    with open(output, "ab") as log:
        proc = subprocess.Popen([sys.executable, *argv], cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    _STARTED[proc.pid] = proc
    return Child(proc.pid, Path(output), Path(result), time.monotonic())
