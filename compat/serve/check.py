"""``compat confirm --check REPORT`` of a serve-path report: gated on what it says, nothing installed is read.

A serve-path report (``compat confirm --path serve --json-file``: its ``checks`` and ``verdict``) is gated on what it
says; nothing installed is read (its server may have run in another venv, on another machine): 0 verdict OK and
every check ok; 1 WRONG or ERROR, an OK with a check not ok, or a report without a ``confirmed`` block naming the
model, widths, dtype, ids, versions, runner, device and TP (then it cannot tell what was confirmed); 4 INCOMPLETE
(a part could not run or a step was not taken); 2 unreadable, or a verdict no serve run gives.
"""

from __future__ import annotations

import sys

from compat.exit_policy import ENVIRONMENT, PATCH_PROBLEM, VERDICT_CODES

from .identity import describe

#: What a serve report's ``confirmed`` block must name (identity.confirmed) for --check to say what it confirmed.
IDENTITY = ("model", "architectures", "num_layers", "hidden_size", "dtype", "ids_served", "vllm",
            "speculators", "runner", "device", "tensor_parallel_size", "kit")


def identity_gaps(doc: dict) -> list[str]:
    """What the report's ``confirmed`` block does not name (all of it where there is no block)."""
    block = doc.get("confirmed")
    if not isinstance(block, dict):
        return list(IDENTITY)
    return [key for key in IDENTITY if block.get(key) is None]


def check(path: str, doc: dict, out) -> int:
    """--check of a serve report: its own verdict and checks, and what it says it confirmed; nothing installed is
    read.  0 OK with every check ok, 1 WRONG / ERROR / an OK with a failed check / no ``confirmed`` block, 4
    INCOMPLETE, 2 a verdict no serve run gives."""
    verdict = doc.get("verdict")
    if verdict not in VERDICT_CODES:
        print(f"confirm --check: {path} is a serve report with verdict {verdict!r}, which no serve run gives "
              f"(one of {', '.join(VERDICT_CODES)}); nothing was checked", file=sys.stderr)
        return ENVIRONMENT
    gaps = identity_gaps(doc)
    if gaps == list(IDENTITY):
        print(f"confirm --check: {path} is a serve report without a 'confirmed' block: it cannot tell what was "
              f"confirmed (model, widths, dtype, ids, vLLM, runner, device, TP); run compat confirm --path serve "
              f"again with this kit -> exit {PATCH_PROBLEM}", file=out)
        return PATCH_PROBLEM
    print(f"  confirmed: {describe(doc['confirmed'])}", file=out)
    if gaps:
        print(f"confirm --check: {path}'s 'confirmed' block does not name {', '.join(gaps)}: it cannot tell what "
              f"was confirmed -> exit {PATCH_PROBLEM}", file=out)
        return PATCH_PROBLEM
    return _serve_verdict(path, doc, verdict, out)


def _clean(check) -> bool:
    """A check that passed and looked at all it claims (runner.status: ``ok``)."""
    return isinstance(check, dict) and check.get("ok") is True and not check.get("not_looked_at") \
        and not check.get("failed_comparisons")


def _serve_verdict(path: str, doc: dict, verdict: str, out) -> int:
    failed = [name for name, c in (doc.get("checks") or {}).items() if not _clean(c)]
    for name in failed:
        print(f"  not ok: {name}", file=out)
    if verdict == "OK" and (failed or not doc.get("checks")):
        what = f"{', '.join(failed)} not ok" if failed else "no check in it"
        print(f"confirm --check: {path} says OK with {what} -> exit {PATCH_PROBLEM}", file=out)
        return PATCH_PROBLEM
    code = VERDICT_CODES[verdict]
    said = {"OK": "every check ok", "INCOMPLETE": "a part could not run or a step was not taken, so it confirmed "
            "less than it claims", "WRONG": "a comparison failed", "ERROR": "the run failed"}[verdict]
    reason = f" ({str(doc.get('reason'))[:300]})" if verdict != "OK" and doc.get("reason") else ""
    print(f"confirm --check: {path} is a serve report, verdict {verdict}: {said}{reason} -> exit {code}", file=out)
    return code
