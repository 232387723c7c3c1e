"""Per file: each row's error against HF (``python ci/gpu/serve_rows.py MODEL WORK_DIR [IDS]``), worst first.

Why: a serve run's check keeps the worst error per row over all files; telling a precision gap from a capture
bug needs to know which prompts are off (long ones that were chunked? prefix-cache repeats? all of them?) and
which of their tokens (K13's symptom: the tail of a file, the tokens of its final prefill chunk).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from compat.checkpoint import num_layers
from compat.serve import checks, reference
from compat.serve.spec import default_layer_ids


def per_file(model: str, work, rows: list[int], rtol: float = 0.05) -> list[dict]:
    """Each file of a run's folder: its row errors and the tokens whose worst element is off by more than
    ``rtol`` x the mean |h| of that token's row in HF (``bad_tokens``: every such position), worst file first."""
    from safetensors.torch import load_file

    files = sorted(Path(work).glob("call*/hidden_states/hs_*.safetensors"))
    data = {f: load_file(str(f)) for f in files}
    refs = reference.hf_rows(model, [d["token_ids"].tolist() for d in data.values()], rows)
    seen, out = set(), []
    for f, d in data.items():
        prompt = tuple(d["token_ids"].tolist())
        ref = refs[prompt].float()
        errs = checks.row_errors(d["hidden_states"], ref, rows)
        scale = ref.abs().mean(dim=(0, 2))  # per row, as row_errors scales
        per_token = ((d["hidden_states"].float() - ref).abs().amax(dim=2) / scale).amax(dim=1)
        bad = [t for t, v in enumerate(per_token.tolist()) if v > rtol]
        out.append({"file": f"{f.parent.parent.name}/{f.name}", "tokens": len(prompt), "repeat": prompt in seen,
                    "worst": round(max(errs.values()), 4), "rows": {k: round(v, 4) for k, v in errs.items()},
                    "bad_tokens": bad})
        seen.add(prompt)
    return sorted(out, key=lambda o: -o["worst"])


def main(model: str, work: str, ids: str = "") -> None:
    rows = sorted(set(int(x) for x in ids.split(","))) if ids else sorted(set(default_layer_ids(num_layers(model))))
    for line in per_file(model, work, rows):
        bad = line.pop("bad_tokens")
        print(json.dumps({**line, "bad_tokens": [bad[0], bad[-1], len(bad)] if bad else []}))


if __name__ == "__main__":
    main(*sys.argv[1:])
