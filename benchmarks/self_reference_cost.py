"""What each serve-path reference costs, measured side by side in one run: wall time as a multiple of one engine start.

    flock /tmp/vllm.lock python3 fixtures/lanes.py run serve -- python benchmarks/self_reference_cost.py [--model DIR]

The same ``compat confirm --path serve`` (the same prompts, ids and server flags) runs once per ``--reference``
(none, hf, self), one after the other, each with its own ``vllm serve``, after one warm-up run (the first start
pays torch.compile's cold cache).  Per run it prints: the engine start (``server_start_s``: the yardstick, one
model load), the client's calls, the whole run as a multiple of its engine start, and the reference's own time
inside the run -- the prompts served again alone plus the checks beyond none's -- as a multiple of the engine
start (the "extra model loads" of goal P6); for ``self`` also the weight bytes its recompute read as a
share of the checkpoint.  The base serve patches
this vLLM needs (K1, K11, K12) are applied for the runs and the installed vLLM is left with the patches it had.
Prints, never asserts.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.contract.serve import switch  # noqa: E402


def confirm(model: str, reference: str, folder: Path, layers: str, dtype: str = "float32", memory: str = "0.1") -> dict:
    report = folder / f"{reference}.json"
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "compat.confirm", "--path", "serve", "--model", model, "--layers",
                           layers, "--reference", reference, "--dtype", dtype, "--gpu-memory-utilization", memory,
                           "--json-file", str(report)], capture_output=True, text=True, cwd=ROOT)
    doc = json.loads(report.read_text()) if report.is_file() else {"verdict": "ERROR", "reason": proc.stderr[-500:]}
    doc["wall_s"] = round(time.monotonic() - started, 2)
    return doc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a checkpoint (default: the tiny Llama with spread norms)")
    parser.add_argument("--layers", default="1,2,3,4")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--as-installed", action="store_true", help="leave the installed patches as they are (a "
                        "device whose vLLM needs no CPU base patch, after `compat apply`); default: the base patches")
    parser.add_argument("--keep", help="copy each run's confirm report (JSON) into this folder")
    parser.add_argument("--gpu-memory-utilization", default="0.1")
    parser.add_argument("--references", default="none,hf,self", help="which references, in order (none first: the "
                        "others' extra time is counted against its checks)")
    args = parser.parse_args()
    from compat.layout import cache_root
    from compat.serve.options import served_device
    from fixtures.tiny_model import build_tiny_llama

    model = args.model or build_tiny_llama(cache_root() / "models" / "serve-tiny-llama-spread-256",
                                           max_positions=256, norm_spread=0.5)
    base = "as installed" if args.as_installed else switch.base()
    was = None if args.as_installed else [p for p in switch.BASE if switch.is_applied(p)]
    folder = Path(tempfile.mkdtemp(prefix="self-cost-"))
    import os

    commit = os.environ.get("GPU_SERVE_COMMIT") or subprocess.run(  # the device's copy has no .git
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout
    dirty = [] if os.environ.get("GPU_SERVE_COMMIT") else subprocess.run(  # the device's copy: the packed commit
        ["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, cwd=ROOT).stdout.split()
    from ci.gpu.serve_records import versions

    print(f"# benchmarks/self_reference_cost.py, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    tree = "modified: " + " ".join(dirty[1::2]) if dirty else "clean tree"
    print(f"commit: {commit.strip()} ({tree}); device: {served_device()}; versions: {versions()}")
    print(f"model: {model}; ids {args.layers}; dtype {args.dtype}; prompts: confirm's serve default (11, then 33); patches: {base}")
    runs = {}
    try:
        if was is not None:
            switch.only("vllm", base)
        memory = args.gpu_memory_utilization
        confirm(model, "none", folder, args.layers, args.dtype, memory)  # warm-up: the first start pays a cold compile
        for reference in args.references.split(","):
            runs[reference] = confirm(model, reference, folder, args.layers, args.dtype, memory)
            if args.keep:
                Path(args.keep).mkdir(parents=True, exist_ok=True)
                (Path(args.keep) / f"{reference}.json").write_text(json.dumps(runs[reference], indent=1))
    finally:
        if was is not None:
            switch.only("vllm", was)
    base_checks = runs.get("none", {}).get("timings", {}).get("checks_s", float("nan"))
    for reference, doc in runs.items():
        t = doc.get("timings", {})
        start = t.get("server_start_s") or float("nan")
        # what the reference adds inside its own run: prompts served again alone (logprobs, twin) and the checks
        # beyond none's (reading the files and checking their shape)
        extra = (t.get("twins_s", 0.0) + t.get("checks_s", float("nan")) - base_checks) / start
        line = (f"{reference:5} {doc['verdict']:6} total {t.get('total_s')} s, engine start {start} s, "
                f"calls {sum(v['seconds'] for k, v in t.items() if k.startswith('call')):.2f} s, served alone "
                f"{t.get('twins_s')} s, checks {t.get('checks_s')} s; total / engine start "
                f"{t.get('total_s', float('nan')) / start:.2f}; the reference's own time / engine start "
                f"{extra:.3f}")
        twin = doc.get("checks", {}).get("twin")
        if twin:
            line += (f"; twin worst {max(twin['worst'].values(), default=None)} ({twin['bit_equal_files']} of "
                     f"{twin['files']} files bit-equal, {twin['rule']})")
        recompute = doc.get("checks", {}).get("recompute")
        if recompute and "share_read" in recompute:
            line += (f"; recompute worst {max(recompute['worst'].values(), default=None)}, read "
                     f"{recompute['weight_bytes_read']} of {recompute['checkpoint_bytes']} "
                     f"weight bytes ({recompute['share_read']:.1%})")
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
