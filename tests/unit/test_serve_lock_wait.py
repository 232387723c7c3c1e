"""``compat confirm --path serve`` names speculators' fixed lock wait as the cause when the client gave up on a file.

Upstream facts: every speculators release with ``generate-offline-data``'s async lock wait (0.6.0.2 to 0.9.0)
defaults ``wait_for_lock_async``'s timeout to 10 s, read here from the wheels; vLLM's server logs one
``Iteration(n): ... iteration elapsed time: X ms`` line per engine step (a real 0.34.0 log from the H100 run in
``docs/gpu/mrv2/h100/``).
"""

from __future__ import annotations

import re
import tarfile
import zipfile
from pathlib import Path

import pytest

from compat.serve.lock_wait import CLIENT_LOCK_WAIT_S, lock_wait_cause, slowest_step_s
from fixtures.wheels import wheel

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "docs" / "gpu" / "mrv2" / "h100" / "logs_cases-bf16.tgz"

#: what asyncio prints when speculators' wait runs out (the last frames of the client's traceback)
CLIENT_TRACEBACK = """Traceback (most recent call last):
  File "/venv/lib/python3.12/site-packages/speculators/cli/generate_offline_data.py", line 154, in process_item
    await wait_for_lock_async(lock_path)
  File "/venv/lib/python3.12/site-packages/speculators/data_generation/vllm_client.py", line 149, in wait_for_lock_async
    async with asyncio.timeout(timeout):
TimeoutError
"""


@pytest.mark.parametrize("release", ["0.6.0.2", "0.7.0.2", "0.8.1", "0.9.0"])
def test_the_kits_lock_wait_is_speculators_own(release):
    source = zipfile.ZipFile(wheel(f"speculators=={release}")).read(
        "speculators/data_generation/vllm_client.py").decode()
    signature = source[source.index("async def wait_for_lock_async("):]
    signature = signature[:signature.index(":\n", signature.index(")"))]
    assert float(re.search(r"timeout=([\d.]+)", signature).group(1)) == CLIENT_LOCK_WAIT_S


def _server_log() -> str:
    with tarfile.open(LOGS) as archive:
        member = next(m for m in archive.getmembers() if m.name.endswith("cases-chunked-cuda-bfloat16/vllm-serve.log"))
        return archive.extractfile(member).read().decode()


def _slowest_by_hand(log: str) -> float:
    times = [line.split("iteration elapsed time: ")[1].split(" ms")[0] for line in log.splitlines()
             if "iteration elapsed time: " in line]
    return max(float(t) for t in times) / 1000


def test_the_slowest_step_is_read_from_a_real_server_log():
    log = _server_log()
    assert slowest_step_s(log) == pytest.approx(_slowest_by_hand(log)) and slowest_step_s(log) < 1
    assert slowest_step_s("no iteration lines") is None


def test_a_lock_given_up_on_while_a_step_outlasted_the_wait_is_the_hosts_doing():
    log = _server_log()
    first = re.search(r"iteration elapsed time: [\d.]+ ms", log).group(0)
    starved = log.replace(first, "iteration elapsed time: 12034.50 ms", 1)
    said = lock_wait_cause(CLIENT_TRACEBACK, starved)
    assert said.startswith("speculators' client gave up waiting for a file's .lock after its fixed 10 s")
    assert "slowest engine step took 12.0 s" in said and "not a hidden-state fault" in said


def test_with_every_step_short_the_writer_held_the_lock_and_nothing_is_blamed_on_the_host():
    said = lock_wait_cause(CLIENT_TRACEBACK, _server_log())
    assert "shorter than that wait" in said and "not a hidden-state fault" not in said


def test_a_client_that_did_not_time_out_on_a_lock_gets_no_such_cause():
    assert lock_wait_cause("TimeoutError: the request took too long", _server_log()) is None
    assert lock_wait_cause("", _server_log()) is None
