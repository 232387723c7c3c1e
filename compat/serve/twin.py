"""Part (b) of ``--reference self``: every prompt served again alone, in the same server, as the file's twin.

After the client's calls, each unique prompt is sent once more, one request at a time, with a per-request
``cache_salt`` (so it misses the prefix cache the calls filled), ``prompt_logprobs`` and the first generated token's
``logprobs`` (part (a) reads those: positions 1..T-1, and the last row's distribution).
Alone, its prefill chunks fall at multiples of the token budget from its first token, not where the batch put
them; it shares no step with another request.  The connector writes its file like any other; it is read once
its ``.lock`` is free (vLLM >= 0.22 writes asynchronously) and deleted.

What the twin catches: every fault that depends on scheduling -- rows of another request in the batch
(swapped or stale slots), a final chunk never saved (K13), rows lost on a prefix-cache hit, a batch-size or
chunk-boundary dependent capture.  What it cannot see: a fault that is the same alone as in a batch (a wrong
layer id, a post-norm or scaled row, a wrong dtype), and a chunking fault that also bites the lone prompt
when it still needs more than one chunk (the twin is then wrong the same way: prompts longer than the budget
are chunked alone too).  Parts (a) and (c) cover those.
"""

from __future__ import annotations

import fcntl
import os
import time
import uuid
from pathlib import Path

LOGPROB_TOP = 5


def wait_unlocked(path: Path, timeout_s: float = 60.0) -> None:
    """Wait for the file and for its ``.lock`` to be free (speculators' client waits the same way)."""
    lock = Path(f"{path}.lock")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.is_file():
            if not lock.exists():
                return
            try:
                fd = os.open(lock, os.O_RDWR)
            except FileNotFoundError:
                return
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                pass
            finally:
                os.close(fd)
        time.sleep(0.1)
    raise OSError(f"{path}: not written (or still locked) {timeout_s:.0f} s after its response")


def serve_alone(server, model: str, prompts, read_files: bool) -> dict[tuple, dict]:
    """``{prompt: {"logprobs": the server's prompt_logprobs, "states": [T, N, H] or None}}``, one request at a
    time, each with its own cache_salt; each file read (when ``read_files``) and deleted."""
    from safetensors.torch import load_file

    out = {}
    for prompt in dict.fromkeys(tuple(p) for p in prompts):
        reply = server.post("/v1/completions", {"model": model, "prompt": list(prompt), "max_tokens": 1,
                                                "temperature": 0.0, "prompt_logprobs": LOGPROB_TOP,
                                                "logprobs": LOGPROB_TOP, "return_tokens_as_token_ids": True,
                                                "cache_salt": f"compat-twin-{uuid.uuid4().hex}"})
        states = None
        path = (reply.get("kv_transfer_params") or {}).get("hidden_states_path")
        if path:
            path = Path(path)
            if read_files:
                wait_unlocked(path)
                states = load_file(str(path))["hidden_states"]
            for stale in (path, Path(f"{path}.lock")):
                stale.unlink(missing_ok=True)
        elif read_files:
            raise OSError(f"the server's reply names no hidden_states_path (kv_transfer_params: "
                          f"{reply.get('kv_transfer_params')!r})")
        choice = reply["choices"][0]
        out[prompt] = {"logprobs": choice.get("prompt_logprobs"), "next": first_generated(choice), "states": states}
    return out


def first_generated(choice: dict) -> dict | None:
    """``{token id: logprob}`` of the first generated token's top-k: the distribution of the prompt's last row,
    which ``prompt_logprobs`` never covers.  vLLM names tokens ``token_id:N`` when asked with
    ``return_tokens_as_token_ids``; None where the reply has no such entry (the check then says so)."""
    top = ((choice.get("logprobs") or {}).get("top_logprobs") or [None])[0]
    if not top:
        return None
    out = {}
    for token, value in top.items():
        if not str(token).startswith("token_id:"):
            return None  # a token given as text cannot be mapped back to its id without the tokenizer
        out[int(str(token).split(":", 1)[1])] = float(value)
    return out


def compare(files, twins: dict, rows: list[int]) -> tuple[dict[int, float], int]:
    """``({id: worst max|diff| / mean|twin| over files}, files bit-equal to their twin)``."""
    from .checks import row_errors

    worst: dict[int, float] = {}
    equal = 0
    for prompt, data in files:
        twin = twins.get(tuple(prompt), {}).get("states")
        states = data["hidden_states"]
        if twin is None or tuple(twin.shape) != tuple(states.shape):
            worst = {k: float("inf") for k in rows}  # a missing or misshapen twin fails, never passes
            continue
        equal += bool((twin == states).all())
        for k, err in row_errors(states, twin, rows).items():
            worst[k] = max(worst.get(k, 0.0), err)
    return worst, equal
