"""speculators 0.7.0.x's client as its own repository script drives it, with the same flags as ``generate-offline-data``.

0.7.0.x has no ``generate-offline-data`` command: its client is
``scripts/data_generation_offline.py`` (tag v0.7.0.1; 0.7.0.2 is untagged and
its wheel's ``vllm_client``, ``offline``, ``train/data`` and vendored
``hs_connectors`` equal v0.7.0.1's), not in the wheel.  Its worker, per sample:
``build_client_item(dataset[i])`` from ``speculators.train.data``, then
``await generate_hidden_states_async(client, model, item, timeout=...,
max_retries=...)`` under a ``--concurrency`` semaphore, then
``wait_for_lock_async(path + ".lock")`` when that lock exists, then
``shutil.move`` to ``<output>/hs_<idx>.safetensors``, then with
``--validate-outputs`` ``check_hidden_states(load_file(target), input_ids)``;
with ``--fail-on-error`` the first failure exits 1.  This module does those
steps with the installed release's own functions and takes the script's flags,
so ``compat.serve.client`` can run it in place of ``speculators
generate-offline-data``.  Its launch script forces ``--no-enable-chunked-prefill``
(appended to every ``vllm serve`` command line): ``LAUNCH`` says so to the tests.

    python -m tests.contract.serve.spec07_client --endpoint URL --preprocessed-data DIR --output DIR \\
        [--concurrency N] [--validate-outputs] [--fail-on-error] [--max-retries N] [--request-timeout S]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import sys
from pathlib import Path

#: what 0.7.0.x's scripts/launch_vllm.py does to every server (tag v0.7.0.1, lines 148-150), as ServeSpec options:
#: chunked prefill off, and so a token budget that holds a whole prompt (vLLM refuses a smaller one unchunked)
LAUNCH_REASON = ("speculators 0.7.0.x's launch script appends --no-enable-chunked-prefill to every `vllm serve` "
                 "(tag v0.7.0.1 scripts/launch_vllm.py:148-150): no prompt is chunked there")

logger = logging.getLogger("spec07_client")


def launch_options(max_model_len: int = 512) -> dict:
    """ServeSpec options of a server that 0.7.0.x's launch script starts."""
    return {"enable_chunked_prefill": False, "max_num_batched_tokens": max_model_len, "max_model_len": max_model_len}


def parse(argv: list[str]) -> argparse.Namespace:
    """The script's flags that compat.serve.client passes (their defaults as the script's)."""
    from speculators.data_generation.vllm_client import DEFAULT_MAX_RETRIES, DEFAULT_REQUEST_TIMEOUT

    parser = argparse.ArgumentParser(prog="spec07_client", description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", default="http://localhost:8000/v1")
    parser.add_argument("--preprocessed-data", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--validate-outputs", action="store_true")
    parser.add_argument("--request-timeout", type=float, default=DEFAULT_REQUEST_TIMEOUT)
    parser.add_argument("--max-retries", type=int, default=DEFAULT_MAX_RETRIES)
    parser.add_argument("--fail-on-error", action="store_true")
    return parser.parse_args(argv)


async def generate(args: argparse.Namespace) -> list[int]:
    """Every sample through the release's functions; the indices skipped (none with --fail-on-error: exit 1)."""
    import openai
    from datasets import load_from_disk
    from safetensors.torch import load_file
    from speculators.data_generation.offline import check_hidden_states
    from speculators.data_generation.vllm_client import generate_hidden_states_async, wait_for_lock_async
    from speculators.train.data import build_client_item

    dataset = load_from_disk(args.preprocessed_data)
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    gate = asyncio.Semaphore(args.concurrency)
    skipped: list[int] = []

    async def sample(idx: int) -> None:
        item = build_client_item(dataset[idx])
        target = output / f"hs_{idx}.safetensors"
        try:
            async with gate:
                path = await generate_hidden_states_async(client, model, item, timeout=args.request_timeout,
                                                          max_retries=args.max_retries)
            if Path(path + ".lock").exists():
                await wait_for_lock_async(path + ".lock")
            await asyncio.to_thread(shutil.move, path, target)
            if args.validate_outputs:
                await asyncio.to_thread(lambda: check_hidden_states(load_file(target), item["input_ids"]))
        except Exception as exc:
            if args.fail_on_error:  # the script: logger.exception, then os._exit(1)
                logger.exception("Fatal: sample %d aborted with --fail-on-error: %s", idx, exc)
                logging.shutdown()
                os._exit(1)
            logger.warning("Skipping sample %d due to error: %s", idx, exc)
            skipped.append(idx)

    async with openai.AsyncOpenAI(base_url=args.endpoint, api_key="EMPTY", max_retries=0) as client:
        model = (await client.models.list()).data[0].id
        await asyncio.gather(*(sample(i) for i in range(len(dataset))))
    return skipped


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO)
    skipped = asyncio.run(generate(parse(argv)))
    if skipped:
        logger.warning("Skipped %d samples due to errors: %s", len(skipped), skipped)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
