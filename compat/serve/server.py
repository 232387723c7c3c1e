"""A real ``vllm serve`` process with ``extract_hidden_states`` and vLLM's hidden-states connector.

The command line is the one speculators' launch script builds (HEAD
``scripts/launch_vllm.py``: ``vllm serve MODEL --speculative_config ...
--kv_transfer_config ...``, the file backend of hs-connectors 0.9.0's
``build_kv_transfer_config``), plus the knobs a small machine needs.  The
server runs in its own session so that stopping it stops its engine core too.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from compat.vllm_log import root_cause

from . import amx_mla
from .spec import ServeSpec

CONNECTOR = "ExampleHiddenStatesConnector"
HEARTBEAT_S = 30.0  # a line while the server starts, so the serve confirm never sits silent for minutes


class ServerError(RuntimeError):
    """The server did not come up, or died; ``log_tail`` holds the end of its log."""

    def __init__(self, message: str, log_tail: str = ""):
        super().__init__(message)
        self.log_tail = log_tail


def speculative_config(layer_ids: list[int]) -> dict:
    return {"method": "extract_hidden_states", "num_speculative_tokens": 1,
            "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": list(layer_ids)}}}


def kv_transfer_config(storage: Path) -> dict:
    return {"kv_connector": CONNECTOR, "kv_role": "kv_producer",
            "kv_connector_extra_config": {"shared_storage_path": str(storage)}}


def command(spec: ServeSpec, port: int, storage: Path) -> list[str]:
    chunked = "--enable-chunked-prefill" if spec.enable_chunked_prefill else "--no-enable-chunked-prefill"
    caching = "--enable-prefix-caching" if spec.enable_prefix_caching else "--no-enable-prefix-caching"
    return [spec.python, "-m", "vllm.entrypoints.cli.main", "serve", spec.model,
            "--host", "127.0.0.1", "--port", str(port), "--dtype", spec.dtype,
            "--max-model-len", str(spec.max_model_len), "--max-num-batched-tokens", str(spec.max_num_batched_tokens),
            "--max-num-seqs", str(spec.max_num_seqs), chunked, caching,
            "--gpu-memory-utilization", str(spec.gpu_memory_utilization),
            "--tensor-parallel-size", str(spec.tensor_parallel_size),
            "--pipeline-parallel-size", str(spec.pipeline_parallel_size),
            *(["--trust-remote-code"] if spec.trust_remote_code else []),
            "--enable-logging-iteration-details",  # one "Iteration(n): ... context tokens" line per engine step
            *(["--speculative-config", json.dumps(speculative_config(spec.layer_ids)),
                "--kv-transfer-config", json.dumps(kv_transfer_config(storage))] if spec.extract else []),
            *(amx_mla.FLAG if amx_mla.reason(spec) else ()),
            *spec.extra_args]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


@contextlib.contextmanager
def deferred_interrupt():
    """Hold a Ctrl-C (SIGINT) for the block's length and raise it after: the block runs whole.  A handler, not a
    blocked signal mask, so a child started inside gets SIGINT's default back at exec.  Outside the main thread
    (where no handler can be set) the block runs as is."""
    held = []
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, lambda *_: held.append(True))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if held:
        raise KeyboardInterrupt


class Server:
    """``with Server(spec) as server:`` -- up and healthy inside, stopped (engine included) after."""

    def __init__(self, spec: ServeSpec):
        self.spec = spec
        self.port = free_port()
        self.storage = spec.work_dir / "storage"
        self.log = Path(spec.log_path) if spec.log_path else spec.work_dir / "vllm-serve.log"
        self.proc: subprocess.Popen | None = None
        self.start_s: float | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def endpoint(self) -> str:
        return f"{self.base}/v1"

    def __enter__(self) -> "Server":
        self.spec.work_dir.mkdir(parents=True, exist_ok=True)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.storage.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        try:
            with self.log.open("w") as log, deferred_interrupt():  # a Ctrl-C inside Popen would orphan the server
                self.proc = subprocess.Popen(command(self.spec, self.port, self.storage), stdout=log,
                                             stderr=subprocess.STDOUT, env=self.spec.environment(),
                                             start_new_session=True)
            self._wait_healthy(started)
        except BaseException:  # Ctrl-C included: the server never outlives a start that did not finish
            self.stop()
            raise
        self.start_s = round(time.monotonic() - started, 2)
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _wait_healthy(self, started: float) -> None:
        said = started
        while time.monotonic() - started < self.spec.start_timeout_s:
            if time.monotonic() - said >= HEARTBEAT_S:  # a cold start on 2 busy cores took 133 s
                said = time.monotonic()
                print(f"          vllm serve still starting ({said - started:.0f} s; {self.log})", file=sys.stderr,
                      flush=True)
            if self.proc.poll() is not None:
                text = tail(self.log, 400)
                cause = root_cause(text)
                raise ServerError((f"{cause.message}\n" if cause else "")
                                  + f"(vllm serve exited with {self.proc.returncode} before it was healthy)", text)
            try:
                with urllib.request.urlopen(f"{self.base}/health", timeout=2) as reply:
                    if reply.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        raise ServerError(f"vllm serve not healthy after {self.spec.start_timeout_s:.0f} s", tail(self.log))

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM to the server's process group, SIGKILL after ``grace_s``.  A Ctrl-C meanwhile is held until the
        group is stopped (then raised): an interrupted stop would leave the engine running with no one to stop it."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with deferred_interrupt():
            for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
                try:
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    return
                try:
                    self.proc.wait(wait)
                except subprocess.TimeoutExpired:
                    continue
                self._kill_leftovers()
                return

    def _kill_leftovers(self) -> None:
        """SIGKILL to what is left of the group once its leader is gone (an engine core whose front end died first).
        Sent right after the leader was reaped: its id cannot name another group that soon."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def get(self, path: str, timeout: float = 30.0) -> str:
        with urllib.request.urlopen(f"{self.base}{path}", timeout=timeout) as reply:
            return reply.read().decode()

    def post(self, path: str, body: dict, timeout: float = 120.0) -> dict:
        request = urllib.request.Request(f"{self.base}{path}", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return json.loads(reply.read())

    def metric(self, name: str) -> float:
        """Sum of a Prometheus sample over its labels (``vllm:prefix_cache_hits_total``); 0 when absent."""
        total = 0.0
        for line in self.get("/metrics").splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""
