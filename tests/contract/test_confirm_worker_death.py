"""A vLLM worker that dies mid-run must end ``compat confirm`` within seconds, with a verdict.

On an H200 a dead worker left confirm waiting on the executor's message
queue until it was killed (docs/gpu/records_b.json: 150 s and 200 s, no
report).  Here a real worker of the real MultiprocExecutor is killed with
SIGKILL right after the engine started; confirm must name it, exit 1, write
the JSON report with verdict ERROR, keep vLLM's log and leave no worker behind.
Both runs are the cell harness's (``confirm_runs._death_run``, ``confirm_runs._busy_run``):
compat confirm in a child forked from the harness, its worker forked from that
child (a real MultiprocExecutor worker behind vLLM's message queues).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import psutil  # vLLM's own dependency: in every lane

#: Generous on two shared CPU cores; confirm's own bound is a few seconds.
EXIT_WITHIN_S = 30


def test_confirm_exits_fast_with_a_verdict_when_a_worker_is_killed(confirm_report):
    """confirm_runs._death_run: compat confirm (--calls 33,11) in a child of the cell's harness; the harness kills its
    worker with SIGKILL as soon as it printed "engine started", inside the first call."""
    run = confirm_report["death"]
    assert "error" not in run, f"{run['error']}:\n{run['output'][-3000:]}"
    text, code, took = run["output"], run["returncode"], run["took"]
    assert code is not None, f"confirm still running {run['took']} s after worker {run['victim']} was killed (hang)"
    assert code == 1, f"exit {code} {took:.1f} s after the kill:\n{text[-3000:]}"
    assert took < EXIT_WITHIN_S
    said = [line for line in text.splitlines() if "worker" in line.lower() and "died" in line.lower()]
    assert said and str(run["victim"]) in said[0] and "-9" in said[0], f"{took:.1f} s:\n{text[-3000:]}"  # SIGKILL
    assert "Traceback" not in text, text[-3000:]
    doc = json.loads(Path(run["json_file"]).read_text())
    assert doc["verdict"] == "ERROR" and doc["ok"] is False
    assert doc["worker_death"]["pid"] == run["victim"] and doc["worker_death"]["exitcode"] == -signal.SIGKILL
    log = Path(run["log"])
    assert log.exists() and "vllm" in log.read_text().lower()
    assert not run["left"], f"processes of the engine still alive after confirm exited: {run['left']}"
    print(f"worker {run['victim']} killed -> confirm exited {code} after {took:.1f} s")


def test_the_watch_ends_a_run_whose_main_thread_is_not_waiting_on_vllm(confirm_report):
    """confirm_runs._busy_run: the worker is killed from ``after``, which then sleeps 600 s (DEATH_GRACE_S = 2)."""
    run = confirm_report["busy"]
    out, mark, doc_path, log = run["output"], Path(run["mark"]), Path(run["json_file"]), Path(run["log"])
    assert not run["hung"], "the run did not end after its worker was killed (hang)"
    assert mark.exists(), f"the engine never ran the after hook ({run['returncode']}):\n{out[-3000:]}"
    killed = json.loads(mark.read_text())
    took = run["ended"] - killed["killed_at"]
    assert run["returncode"] == 1 and doc_path.exists(), f"exit {run['returncode']} after {took:.1f} s:\n{out[-3000:]}"
    assert took < EXIT_WITHIN_S, took
    doc = json.loads(doc_path.read_text())
    assert doc["verdict"] == "ERROR" and doc["error"]["type"] == "WorkerDied" and doc["stage"] == "compared"
    said = [line for line in out.splitlines() if line.startswith("confirm: ERROR")]
    assert said and f"pid {killed['pid']}" in said[0] and "SIGKILL" in said[0], out[-3000:]
    assert doc["worker_death"]["pid"] == killed["pid"] and doc["worker_death"]["exitcode"] == -signal.SIGKILL
    assert log.exists() and "vllm" in log.read_text().lower()
    assert not psutil.pid_exists(killed["pid"]) or psutil.Process(killed["pid"]).status() == psutil.STATUS_ZOMBIE
    print(f"worker {killed['pid']} killed outside any RPC -> run ended after {took:.1f} s")
