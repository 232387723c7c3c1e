"""Serve-path throughput, patched against unpatched, side by side in one run: samples/s and tokens/s.

    python benchmarks/serve_throughput.py [--prompts 128] [--length 256] [--pairs 3] [--budgets 16384,64]
    (on CPU: flock /tmp/vllm.lock python3 fixtures/lanes.py run serve -- python benchmarks/serve_throughput.py ...)

Per token budget (``--max-num-batched-tokens``), two real ``vllm serve`` with the same flags run side by side: one
started with every serve patch the registry finds needed on the installed vLLM (the kit's patcher, as ``compat
apply`` puts them), one started with none (the byte-exact installed vLLM; each server imports the connector at
start, so the two keep their code while they run).  speculators' own client (``speculators generate-offline-data``,
compat/serve/client.py) then sends the same prompts to each, alternately A B A B (``--pairs`` pairs), one client run
after the other, no prefix cache (a repeat would be a cache hit).  Printed: every run, the ratio patched/unpatched
(samples/s) per pair and the median per budget.  Prints, never asserts (correctness is the proofs' business:
e.g. on vLLM 0.17-0.21 unpatched is wrong wherever a final prefill chunk fits the blocks it holds, K13).
The installed vLLM is left with the patches it had before.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from compat.serve import ServeSpec, client  # noqa: E402
from compat.serve.server import Server  # noqa: E402
from ci.gpu.serve_records import versions  # noqa: E402
from tests.contract.serve import switch  # noqa: E402


def needed_on_vllm() -> list[str]:
    """The serve patches on vLLM that the registry judges needed on the installed packages (one surface)."""
    from compat import registry

    _, surf = switch.decision(switch.BASE[0])
    return [p.id for p in registry.load_patches("serve")
            if p.target == "vllm" and registry.judge(p, surf).verdict == "needed"]



def one_run(server: Server, prompts, work: Path, tokens: int) -> dict:
    spec = server.spec
    run = client.generate(spec.python, server.endpoint, prompts, work, spec.concurrency, spec.environment(),
                          spec.client_timeout_s)
    shutil.rmtree(work / "hidden_states", ignore_errors=True)  # 128 files a run; only the time is kept
    if run.returncode != 0 or len(run.files) != len(prompts):
        return {"error": f"client exit {run.returncode}, {len(run.files)}/{len(prompts)} files (log {run.log})"}
    return {"seconds": run.seconds, "samples_per_s": len(prompts) / run.seconds, "tokens_per_s": tokens / run.seconds}


def show(label: str, row: dict) -> str:
    if "error" in row:
        return f"    {label:10} FAILED: {row['error']}"
    return (f"    {label:10} {row['seconds']:7.2f} s  {row['samples_per_s']:7.2f} samples/s  "
            f"{row['tokens_per_s']:10.1f} tokens/s")


def ratios(pairs: list[tuple[dict, dict]]) -> list[float]:
    """patched / unpatched samples/s for each pair where both ran."""
    return [a["samples_per_s"] / b["samples_per_s"] for a, b in pairs if "error" not in a and "error" not in b]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a local checkpoint (default: the tiny Llama, built once)")
    parser.add_argument("--prompts", type=int, default=128)
    parser.add_argument("--length", type=int, default=256, help="tokens per prompt")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--budgets", default="16384,64", help="--max-num-batched-tokens values, one server pair each")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cuda", help="picks nothing but the label (the engine picks its device)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.15)
    parser.add_argument("--layer-ids", default="1,2,3,4", help="distinct, ascending (the final id last)")
    parser.add_argument("--extra", default="--enforce-eager", help="more server flags, the same for every server")
    args = parser.parse_args(argv)
    from compat.layout import cache_root
    from fixtures.tiny_model import build_tiny_llama

    model = args.model or build_tiny_llama(cache_root() / "models" / "serve-tiny-llama")
    rng = random.Random(0)
    prompts = [[rng.randrange(4, 512) for _ in range(args.length)] for _ in range(args.prompts)]
    tokens, budgets = args.prompts * args.length, [int(b) for b in args.budgets.split(",")]
    patched = needed_on_vllm()
    was = [p for p in patched if switch.is_applied(p)]  # restored at the end
    print(f"versions: {versions()}")
    print(f"{args.prompts} prompts x {args.length} tokens, {args.concurrency} in flight, {args.pairs} pairs per "
          f"budget, ids {args.layer_ids}, {args.dtype}, flags {args.extra!r}, model {model}", flush=True)
    print(f"patched = {patched or 'none needed'}; unpatched = no kit patch (installed vLLM as shipped)", flush=True)
    work = Path(tempfile.mkdtemp(prefix="serve-bench-"))
    common = dict(model=str(model), max_model_len=max(512, args.length + 16), concurrency=args.concurrency,
                  enable_prefix_caching=False, layer_ids=[int(k) for k in args.layer_ids.split(",")], dtype=args.dtype,
                  device=args.device, gpu_memory_utilization=args.gpu_memory_utilization, extra_args=args.extra.split(),
                  start_timeout_s=300.0, client_timeout_s=300.0, calls=[prompts])
    medians = {}
    with ExitStack() as stack:
        servers = {}
        for name, ids in (("patched", patched), ("unpatched", [])):
            switch.only("vllm", ids)
            for b in budgets:  # one after another: vLLM profiles free GPU memory at start, a neighbour's start moves it
                server = stack.enter_context(Server(ServeSpec(work_dir=work / f"{name}-{b}", max_num_batched_tokens=b,
                                                              **common)))
                servers[name, b] = server
                print(f"  server {name:9} budget {b:5}: up in {server.start_s:.1f} s", flush=True)
        switch.only("vllm", was)
        for b in budgets:
            print(f"budget {b} (--max-num-batched-tokens), A = patched, B = unpatched:", flush=True)
            pairs = []
            for i in range(args.pairs):
                a = one_run(servers["patched", b], prompts, work / f"patched-{b}" / f"run{i}", tokens)
                u = one_run(servers["unpatched", b], prompts, work / f"unpatched-{b}" / f"run{i}", tokens)
                pairs.append((a, u))
                r = ratios([(a, u)])
                print(f"  pair {i + 1}:", f"ratio patched/unpatched {r[0]:.3f}" if r else "no ratio", flush=True)
                print(show("patched", a), show("unpatched", u), sep="\n", flush=True)
            all_r = ratios(pairs)
            medians[b] = statistics.median(all_r) if all_r else None
            print(f"  median ratio at budget {b}: " + (f"{medians[b]:.3f} over {len(all_r)} pairs" if all_r else "none"),
                  flush=True)
    shutil.rmtree(work, ignore_errors=True)
    print("summary: " + ", ".join(f"budget {b}: {m:.3f}" if m else f"budget {b}: none" for b, m in medians.items())
          + " (goal >= 0.95)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
