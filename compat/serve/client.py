"""speculators' own client against the server: ``speculators generate-offline-data`` on a prepared dataset.

The dataset has the column the client reads (``input_ids``, torch format, as
``speculators prepare-data`` saves it), so every request is the client's own:
``/v1/completions`` with the token ids, ``max_tokens=1``,
``return_token_ids``, its check that the prompt ids come back equal, its wait
on ``<file>.lock``, and its move to ``hs_<index>.safetensors``.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

#: the client's flags: fail on the first bad sample instead of skipping it, no retries (a retry hides a crash)
FLAGS = ("--validate-outputs", "--fail-on-error", "--max-retries", "0")
#: how the client is started after ``python``: speculators >= 0.8's command; a release whose client is a repository
#: script (0.7.0.x) is run through a module that takes the same flags (tests/contract/serve/spec07_client.py)
COMMAND = ("-m", "speculators", "generate-offline-data")


@dataclass
class ClientRun:
    returncode: int
    seconds: float
    files: dict[int, Path]  # prompt index -> its safetensors
    log: Path


def prepare_dataset(prompts: list[list[int]], path: Path, python: str, env: dict) -> None:
    """``datasets.Dataset`` of ``input_ids`` saved to disk, in the lane's interpreter (datasets lives there)."""
    code = ("import json, sys\nfrom datasets import Dataset\n"
            "ds = Dataset.from_dict({'input_ids': json.loads(sys.stdin.read())})\n"
            "ds.set_format('torch')\nds.save_to_disk(sys.argv[1])\n")
    import json

    subprocess.run([python, "-c", code, str(path)], input=json.dumps(prompts), text=True, check=True,
                   env=env, capture_output=True)


def generate(python: str, endpoint: str, prompts: list[list[int]], work: Path, concurrency: int, env: dict,
             timeout_s: float = 600.0) -> ClientRun:
    """Run ``speculators generate-offline-data``; its files by prompt index (missing ones are absent)."""
    work.mkdir(parents=True, exist_ok=True)
    data, out, log = work / "dataset", work / "hidden_states", work / "client.log"
    prepare_dataset(prompts, data, python, env)
    argv = [python, *COMMAND, "--endpoint", endpoint,
            "--preprocessed-data", str(data), "--output", str(out), "--concurrency", str(concurrency), *FLAGS]
    started = time.monotonic()
    with log.open("w") as handle:
        proc = subprocess.run(argv, stdout=handle, stderr=subprocess.STDOUT, env=env, timeout=timeout_s)
    seconds = round(time.monotonic() - started, 2)
    files = {i: out / f"hs_{i}.safetensors" for i in range(len(prompts))}
    return ClientRun(proc.returncode, seconds, {i: p for i, p in files.items() if p.is_file()}, log)
