"""How far vLLM's own extract_hidden_states moves with the batch it runs in (GPU lane).

confirm's same-engine bound assumes vllm-extract is a near-exact twin of the generator's engine. This runs the
reference twice on the same prompts (all in one batch; then each prompt in a batch of its own) and prints the
per-layer max|diff| / mean|h| between them, the statistic confirm judges by, plus nrms and min cosine (the
definitions of compat.confirm.compare.LayerError, min cosine here in float32). No unit test: the unit venv has no
torch, and a test that only skips there proves nothing; docs/gpu/moe/h100/noise_*.json are its outputs.
usage: python3 -m ci.gpu.extract_noise MODEL LAYERS DTYPE OUT_JSON [N_PROMPTS] [N_ALONE] [BUDGET]
BUDGET: max_num_batched_tokens of the second batched run (chunked prefill, as the generator runs it),
or a JSON object of engine arguments for it (e.g. {"max_num_batched_tokens": 96, "enforce_eager": true}).
"""
import json
import sys
import tempfile
from pathlib import Path

import torch

from compat.confirm.extract import run_reference


def stats(a, b):
    d = (a - b).abs()
    return {"rel": float(d.max() / b.abs().mean()), "nrms": float((a - b).norm() / b.norm()),
            "min_cos": float(torch.nn.functional.cosine_similarity(a, b, dim=-1).min())}


def main(model, layers, dtype, out, n=90, alone=4, budget=None):
    layers = [int(x) for x in layers.split(",")]
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(10, 400, (int(torch.randint(8, 200, (1,), generator=g)),), generator=g).tolist()
               for _ in range(int(n))]
    work = Path(tempfile.mkdtemp(prefix="noise-"))
    batched, meta = run_reference(model, prompts, layers, dtype=dtype, work_dir=work / "b")
    chunked = (json.loads(budget) if budget.startswith("{") else {"max_num_batched_tokens": int(budget)}) if budget else None
    again, _ = run_reference(model, prompts, layers, dtype=dtype, work_dir=work / "b2", engine_args=chunked)
    report = {"model": model, "dtype": dtype, "layers": layers, "prompts": len(prompts), "meta": meta, "second_run_engine_args": chunked,
              "batched_vs_batched": {}, "alone_vs_batched": {}}
    for li, k in enumerate(layers):
        report["batched_vs_batched"][k] = max((stats(again[tuple(p)][li], batched[tuple(p)][li]) for p in prompts),
                                             key=lambda s: s["rel"])
    rows = {k: [] for k in layers}
    for i, p in enumerate(prompts[: int(alone)]):
        one, _ = run_reference(model, [p], layers, dtype=dtype, work_dir=work / f"a{i}")
        for li, k in enumerate(layers):
            rows[k].append({"tokens": len(p), **stats(one[tuple(p)][li], batched[tuple(p)][li])})
    report["alone_vs_batched"] = rows
    Path(out).write_text(json.dumps(report, indent=1))
    for k in layers:
        print(k, "batched twice", report["batched_vs_batched"][k], "alone", [round(r["rel"], 3) for r in rows[k]])


if __name__ == "__main__":
    main(*sys.argv[1:])
