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


def test_confirm_exits_fast_with_a_verdict_when_a_worker_is_killed(patched, busy_run, tmp_path):
    """``busy_run`` only starts the other kill test's process, to overlap with this one."""
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


#: Runs in its own process: a worker killed while the main thread is busy outside vLLM (in ``after``), so vLLM's
#: own monitor has no waiting call to cancel; only confirm's watch can end the run.
BUSY_ELSEWHERE = r"""
import json, os, sys, time
import psutil
from compat import confirm

model, doc_path, mark_path, log_path = sys.argv[1:5]
confirm.DEATH_GRACE_S = 2.0  # vLLM's own error cannot come here (nothing waits on it): the watch steps in after this
layers = list(range(confirm.num_layers(model)))
calls = confirm.make_calls((1,))
reference = confirm.hf_reference(model, [p for c in calls for p in c], layers)
module = __import__(confirm.GEN_MOD, fromlist=["_"])

def after(gen):
    victim = gen.executor.workers[0].proc
    with open(mark_path, "w") as handle:
        json.dump({"pid": victim.pid, "killed_at": time.time()}, handle)
    psutil.Process(victim.pid).kill()
    time.sleep(600)  # busy elsewhere: the old confirm waits all of it

import argparse
report = confirm.Report(argparse.Namespace(json=False, json_file=doc_path), layers)
on_death = lambda doc: confirm.abort_run(report, doc)  # what `compat confirm` does on a death

out = confirm.run_generator(module, model, calls, reference, layers, 96, after=after, log_path=log_path,
                            on_death=on_death)
print("RETURNED", json.dumps(out.get("error"), default=str))
sys.exit(3)
"""


class BusyRun:
    """BUSY_ELSEWHERE in its own process, started early: it runs while the command-line kill test runs (both
    need only the patched lane, and two engine starts overlap on two cores); a thread notes when it ends."""

    def __init__(self, model: str, where):
        self.doc_path, self.mark, self.log = where / "doc.json", where / "killed.json", where / "vllm.log"
        self.proc = subprocess.Popen([sys.executable, "-c", BUSY_ELSEWHERE, model, str(self.doc_path), str(self.mark),
                                      str(self.log)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     cwd="/")
        self.out, self.ended = "", None
        self.thread = threading.Thread(target=self._wait, daemon=True)
        self.thread.start()

    def _wait(self) -> None:
        self.out = self.proc.stdout.read()
        self.proc.wait()
        self.ended = time.time()

    def result(self, timeout: float = 600):
        self.thread.join(timeout)
        if self.ended is None:
            _kill_tree(self.proc.pid)
            self.proc.wait(timeout=30)
            pytest.fail("the run did not end after its worker was killed (hang)")
        return self.proc, self.out, self.ended


@pytest.fixture(scope="module")
def busy_run(tiny_model, tmp_path_factory):
    compat()  # the generator must start on this lane; idempotent after patched_report
    run = BusyRun(tiny_model, tmp_path_factory.mktemp("busy"))
    yield run
    if run.proc.poll() is None:
        _kill_tree(run.proc.pid)


def test_the_watch_ends_a_run_whose_main_thread_is_not_waiting_on_vllm(busy_run):
    proc, out, ended = busy_run.result()
    doc_path, mark, log = busy_run.doc_path, busy_run.mark, busy_run.log
    assert mark.exists(), f"the engine never ran the after hook ({proc.returncode}):\n{out[-3000:]}"
    killed = json.loads(mark.read_text())
    took = ended - killed["killed_at"]
    assert proc.returncode == 1 and doc_path.exists(), f"exit {proc.returncode} after {took:.1f} s:\n{out[-3000:]}"
    assert took < EXIT_WITHIN_S, took
    doc = json.loads(doc_path.read_text())
    assert doc["verdict"] == "ERROR" and doc["error"]["type"] == "WorkerDied" and doc["stage"] == "compared"
    said = [line for line in out.splitlines() if line.startswith("confirm: ERROR")]
    assert said and f"pid {killed['pid']}" in said[0] and "SIGKILL" in said[0], out[-3000:]
    assert doc["worker_death"]["pid"] == killed["pid"] and doc["worker_death"]["exitcode"] == -signal.SIGKILL
    assert log.exists() and "vllm" in log.read_text().lower()
    assert not psutil.pid_exists(killed["pid"]) or psutil.Process(killed["pid"]).status() == psutil.STATUS_ZOMBIE
    print(f"worker {killed['pid']} killed outside any RPC -> run ended after {took:.1f} s")
