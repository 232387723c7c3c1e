"""Per file: each row's error against HF (``python ci/gpu/serve_rows.py MODEL WORK_DIR [IDS]``), worst first.

Why: a serve run's check keeps the worst error per row over all files; telling a precision gap from a capture
bug needs to know which prompts are off (long ones that were chunked? prefix-cache repeats? all of them?).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from compat.serve import checks, reference
from compat.serve.spec import default_layer_ids, num_layers


def main(model: str, work: str, ids: str = "") -> None:
    from safetensors.torch import load_file

    rows = sorted(set(int(x) for x in ids.split(","))) if ids else sorted(set(default_layer_ids(num_layers(model))))
    files = sorted(Path(work).glob("call*/hidden_states/hs_*.safetensors"))
    data = {f: load_file(str(f)) for f in files}
    refs = reference.hf_rows(model, [d["token_ids"].tolist() for d in data.values()], rows)
    seen, out = set(), []
    for f, d in data.items():
        prompt = tuple(d["token_ids"].tolist())
        errs = checks.row_errors(d["hidden_states"], refs[prompt], rows)
        per_token = (d["hidden_states"].float() - refs[prompt]).abs().amax(dim=(1, 2))
        bad = [t for t, v in enumerate(per_token.tolist()) if v > 0.05 * float(refs[prompt].abs().mean())]
        out.append({"file": f"{f.parent.parent.name}/{f.name}", "tokens": len(prompt), "repeat": prompt in seen,
                    "worst": round(max(errs.values()), 4), "rows": {k: round(v, 4) for k, v in errs.items()},
                    "bad_tokens": [bad[0], bad[-1], len(bad)] if bad else []})
        seen.add(prompt)
    for line in sorted(out, key=lambda o: -o["worst"]):
        print(json.dumps(line))


if __name__ == "__main__":
    main(*sys.argv[1:])
