"""Why speculators' client came back with fewer files than prompts when it gave up on a file's lock.

speculators >= 0.6's ``generate-offline-data`` waits for the ``.lock`` the KV connector holds while it writes a
sample's safetensors file, with a fixed timeout and no flag to change it (``wait_for_lock_async(lock_path,
timeout=10.0)`` in ``speculators/data_generation/vllm_client.py``).  When the server is slower than that, the
client raises ``TimeoutError`` and the sample is lost: the hidden states were not wrong, the host was too slow
(a 2-core CI host running two jobs saw one 7 ms engine step take 10.1 s), or the file too large to write in time.
A user who reads only "31 of 33 files" would look for a bug in the kit or in vLLM; this names the cause, with the
slowest engine step the server logged (``--enable-logging-iteration-details``, which ``compat confirm`` turns on).
"""

from __future__ import annotations

import re

#: speculators' fixed lock wait, seconds (``wait_for_lock_async``'s default, which its client never overrides)
CLIENT_LOCK_WAIT_S = 10.0

#: one line per engine step: vLLM's ``v1/metrics/loggers.py`` "... iteration elapsed time: %.2f ms ..."
STEP_TIME = re.compile(r"Iteration\(\d+\):.*?iteration elapsed time: ([\d.]+) ms")


def slowest_step_s(server_log: str) -> float | None:
    """The longest engine step the server logged, in seconds; None where it logged none."""
    steps = [float(ms) / 1000 for ms in STEP_TIME.findall(server_log)]
    return max(steps) if steps else None


def lock_wait_cause(client_log: str, server_log: str) -> str | None:
    """The reason to put first when the client's log shows it gave up waiting on a lock, else None."""
    if "wait_for_lock" not in client_log or "TimeoutError" not in client_log:
        return None
    said = (f"speculators' client gave up waiting for a file's .lock after its fixed {CLIENT_LOCK_WAIT_S:g} s "
            f"(wait_for_lock_async, speculators/data_generation/vllm_client.py; no flag changes it), so that "
            f"sample's file was not collected")
    slowest = slowest_step_s(server_log)
    if slowest is not None and slowest >= CLIENT_LOCK_WAIT_S:
        return (f"{said}: the server's slowest engine step took {slowest:.1f} s, longer than that wait, so the host "
                f"was too slow or too loaded for this client (not a hidden-state fault); run it again on an idle "
                f"host")
    shown = f"{slowest:.1f} s" if slowest is not None else "not logged"
    return (f"{said}; the server's slowest engine step ({shown}) was shorter than that wait, so the connector "
            f"held the lock while writing the file: a slow disk or a large file")
