"""One JSON line per serve run on the GPU (``$GPU_SERVE_RECORDS``), so a call stopped mid-module keeps what ran.

Why beside junit: the junit XML says pass/fail; the line keeps the numbers (the worst relative error per row, the
tolerance rule, timings, the reason of an ERROR) and the versions that produced them.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import time


def versions() -> dict:
    out = {}
    for dist in ("vllm", "speculators", "hs-connectors", "transformers", "torch", "datasets"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = None
    return out


def record(name: str, spec, outcome) -> None:
    """Append ``name``'s spec knobs and outcome to the records file (nothing when the variable is unset), with the
    commit that ran (``GPU_SERVE_COMMIT``: serve.sh reads it from the packed tree's src.commit; else unknown)."""
    path = os.environ.get("GPU_SERVE_RECORDS")
    if not path:
        return
    knobs = {k: getattr(spec, k) for k in ("dtype", "device", "layer_ids", "max_num_batched_tokens",
                                            "enable_chunked_prefill", "enable_prefix_caching", "env", "extra_args")}
    line = {"name": name, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "versions": versions(),
            "commit": os.environ.get("GPU_SERVE_COMMIT", "unknown"), "spec": knobs, "outcome": outcome.as_dict()}
    with open(path, "a") as handle:
        handle.write(json.dumps(line, default=str) + "\n")


def recorded(run, name_of):
    """``run`` that records each outcome under ``name_of(spec)``."""

    def wrapper(spec):
        outcome = run(spec)
        record(name_of(spec), spec, outcome)
        return outcome

    return wrapper
