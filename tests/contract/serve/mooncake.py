"""A real Mooncake store for the serve tests: ``mooncake_master`` (mooncake-transfer-engine-non-cuda) over TCP, the
``kv_transfer_config`` hs-connectors' own Mooncake backend builds for ``vllm serve``, and its own reader.

No metadata server: the clients find each other by P2P handshake (hs-connectors' default).  The producer's
segment lives in the vLLM worker, so samples are read while the server runs.  The reader is hs-connectors'
``MooncakeTransfer`` (what its trainer uses): ``get_generated(handle)`` waits for the manifest and checks each
tensor's shape, dtype and CRC against it; a producer's error marker raises ``MooncakeIntegrityError``.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
from pathlib import Path

HOST = "127.0.0.1"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


class Master:
    """``with Master(log) as master:`` a ``mooncake_master`` on free ports, stopped after."""

    def __init__(self, log: Path):
        self.log, self.port, self.proc = log, _free_port(), None

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def __enter__(self) -> "Master":
        binary = Path(sys.executable).parent / "mooncake_master"
        with self.log.open("w") as out:
            self.proc = subprocess.Popen([binary, f"--rpc_port={self.port}", f"--rpc_address={HOST}",
                                          f"--metrics_port={_free_port()}", f"--metrics_host={HOST}",
                                          "--enable_metric_reporting=false"], stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mooncake_master exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            with socket.socket() as sock:
                if sock.connect_ex((HOST, self.port)) == 0:
                    return self
            time.sleep(0.2)
        self.__exit__()
        raise RuntimeError(f"mooncake_master not listening on {self.address} after 30 s")

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def _args(master: Master) -> argparse.Namespace:
    """The flags hs-connectors' launch/train parsers give (MooncakeBackend._add_mooncake_args), sized for CI."""
    return argparse.Namespace(mooncake_master=master.address, mooncake_metadata_server="P2PHANDSHAKE",
                              mooncake_protocol="tcp", mooncake_global_segment_gib=0.25,
                              mooncake_local_buffer_gib=0.125, mooncake_writer_threads=2)


def kv_transfer_config(master: Master) -> dict:
    """hs-connectors' own ``kv_transfer_config`` for its Mooncake connector, on the loopback interface."""
    from hs_connectors.transfer import MooncakeBackend

    config = MooncakeBackend.build_kv_transfer_config(_args(master))
    config["kv_connector_extra_config"]["mooncake"]["local_hostname"] = HOST
    return config


def reader(master: Master):
    """hs-connectors' ``MooncakeTransfer`` (its trainer's reader), set up against ``master``."""
    from hs_connectors.mooncake_store import MooncakeHiddenStatesStore, MooncakeStoreConfig
    from hs_connectors.transfer import MooncakeTransfer

    args = _args(master)
    transfer = MooncakeTransfer(MooncakeHiddenStatesStore(MooncakeStoreConfig(
        local_hostname=HOST, metadata_server=args.mooncake_metadata_server, master_server_address=args.mooncake_master,
        global_segment_size=round(args.mooncake_global_segment_gib * 1024 ** 3),
        local_buffer_size=round(args.mooncake_local_buffer_gib * 1024 ** 3), protocol=args.mooncake_protocol)))
    transfer.setup()
    return transfer


def handle(server, model: str, prompt: list[int]) -> str:
    """One completion (``max_tokens=1``, as speculators' client sends it); the Mooncake key the connector returns."""
    reply = server.post("/v1/completions", {"model": model, "prompt": prompt, "max_tokens": 1}, timeout=300)
    params = reply.get("kv_transfer_params") or {}
    if "handle" not in params:
        raise AssertionError(f"no Mooncake handle in the reply's kv_transfer_params: {params}")
    return params["handle"]
