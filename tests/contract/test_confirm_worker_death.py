"""A vLLM worker that dies mid-run must end ``compat confirm`` within seconds, with a verdict.

On an H200 a dead worker left confirm waiting on the executor's message
queue until it was killed (docs/gpu/records_b.json: 150 s and 200 s, no
report).  Here a real worker of the real MultiprocExecutor is killed with
SIGKILL right after the engine started; confirm must name it, exit 1, write
the JSON report with verdict ERROR, keep vLLM's log and leave no worker behind.
"""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time

import psutil  # vLLM's own dependency: in every lane
import pytest

from tests.contract.conftest import compat

#: Generous on two shared CPU cores; confirm's own bound is a few seconds.
EXIT_WITHIN_S = 30
#: The kill lands right after "engine started", well inside the first call (33 prompts of 250-400 tokens).
CALLS = "33,11"


@pytest.fixture
def patched(tiny_model):
    compat()  # the generator must start on this lane; idempotent after patched_report
    return tiny_model


def _lines(stream, out: queue.Queue) -> None:
    for line in stream:
        out.put(line)
    out.put(None)


def _workers(pid: int) -> list[psutil.Process]:
    """vLLM's worker processes under ``pid``: vLLM titles them VLLM::Worker... (setproctitle)."""
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if "Worker" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


def _kill_tree(pid: int) -> None:
    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for proc in procs:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass


def test_confirm_exits_fast_with_a_verdict_when_a_worker_is_killed(patched, tmp_path):
    log, doc_path = tmp_path / "vllm.log", tmp_path / "confirm.json"
    proc = subprocess.Popen([sys.executable, "-m", "compat.confirm", "--model", patched, "--log", str(log),
                             "--json-file", str(doc_path), "--calls", CALLS],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd="/")
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_lines, args=(proc.stdout, lines), daemon=True).start()
    shown: list[str] = []
    try:
        deadline = time.monotonic() + 600
        while not any("engine started" in line for line in shown):
            line = lines.get(timeout=max(1.0, deadline - time.monotonic()))
            assert line is not None, "confirm ended before the engine started:\n" + "".join(shown[-40:])
            shown.append(line)
        workers = _workers(proc.pid)
        assert workers, f"no vLLM worker process under confirm (pid {proc.pid})"
        everyone = psutil.Process(proc.pid).children(recursive=True)
        victim = workers[0]
        victim.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        try:
            code = proc.wait(timeout=EXIT_WITHIN_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"confirm still running {EXIT_WITHIN_S} s after worker {victim.pid} was killed (hang)")
        took = time.monotonic() - killed_at
    finally:
        if proc.poll() is None:
            _kill_tree(proc.pid)
            proc.wait(timeout=30)
    time.sleep(0.5)
    while (line := lines.get(timeout=10)) is not None:
        shown.append(line)
    text = "".join(shown)
    assert code == 1, f"exit {code} {took:.1f} s after the kill:\n{text[-3000:]}"
    assert took < EXIT_WITHIN_S
    said = [line for line in shown if "worker" in line.lower() and "died" in line.lower()]
    assert said and str(victim.pid) in said[0] and "-9" in said[0], f"{took:.1f} s:\n{text[-3000:]}"  # SIGKILL: -9
    assert "Traceback" not in text, text[-3000:]
    doc = json.loads(doc_path.read_text())
    assert doc["verdict"] == "ERROR" and doc["ok"] is False
    assert doc["worker_death"]["pid"] == victim.pid and doc["worker_death"]["exitcode"] == -signal.SIGKILL
    assert log.exists() and "vllm" in log.read_text().lower()
    left = [p.pid for p in everyone if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not left, f"processes of the engine still alive after confirm exited: {left}"
    print(f"worker {victim.pid} killed -> confirm exited {code} after {took:.1f} s")
