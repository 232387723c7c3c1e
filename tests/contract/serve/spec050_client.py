"""speculators 0.5.0's client as its own script drives it, against a running ``vllm serve`` (K7's proof).

speculators 0.5.0 has no ``generate-offline-data`` command: its client is the
repository script ``scripts/data_generation_offline.py`` (tag v0.5.0, not in
the wheel or the sdist), whose worker does, per sample (lines 281-298):
``await generate_hidden_states_async(client, model, input_ids, timeout=...,
max_retries=...)`` from the installed ``speculators.data_generation.vllm_client``,
then ``shutil.move(path, <output>/hs_<idx>.safetensors)`` at once, then with
``--validate-outputs`` its ``check_safetensors_file`` (token ids equal,
``hidden_states.shape[0] == len(tokens)``).  This module does those three
steps in that order with the installed speculators' own function, so the patch
under test (in ``extract_output``) is the installed code; only the queue and
progress bar are left out.

    python -m tests.contract.serve.spec050_client ENDPOINT PROMPTS_JSON OUTPUT_DIR  -> JSON on stdout
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import time
from pathlib import Path


def check_safetensors_file(path: Path, tokens: list[int]) -> None:
    """The v0.5.0 script's --validate-outputs check (its own two conditions)."""
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        if f.get_tensor("token_ids").tolist() != tokens:
            raise ValueError(f"Token ids in {path} don't match expected token ids")
        length = list(f.get_slice("hidden_states").get_shape())[0]
        if length != len(tokens):
            raise ValueError(f"Sequence length of hidden states {length} in {path} doesn't match num tokens")


async def main(endpoint: str, prompts: list[list[int]], output: Path, concurrency: int = 32) -> dict:
    import openai
    from speculators.data_generation.vllm_client import generate_hidden_states_async

    output.mkdir(parents=True, exist_ok=True)
    gate = asyncio.Semaphore(concurrency)
    outcome: dict[int, str] = {}

    async def sample(idx: int, ids: list[int]) -> None:
        target = output / f"hs_{idx}.safetensors"
        try:
            async with gate:
                path = await generate_hidden_states_async(client, model, ids, timeout=120, max_retries=0)
            await asyncio.to_thread(shutil.move, path, target)
            await asyncio.to_thread(check_safetensors_file, target, ids)
            outcome[idx] = "ok"
        except Exception as exc:  # the script logs "Skipping sample %d due to error: %s"
            outcome[idx] = f"{type(exc).__name__}: {exc}"

    started = time.monotonic()
    async with openai.AsyncOpenAI(base_url=endpoint, api_key="EMPTY", max_retries=0) as client:
        model = (await client.models.list()).data[0].id
        await asyncio.gather(*(sample(i, p) for i, p in enumerate(prompts)))
    return {"seconds": round(time.monotonic() - started, 2), "samples": {str(k): v for k, v in sorted(outcome.items())}}


if __name__ == "__main__":
    endpoint, prompts_file, out = sys.argv[1:4]
    result = asyncio.run(main(endpoint, json.loads(Path(prompts_file).read_text()), Path(out)))
    print(json.dumps(result))
