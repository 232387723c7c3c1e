"""Reports: a table for people, JSON for CI, and the exit-code contract.

Exit codes (``python -m compat.apply`` and friends):
    0  everything needed is applied (or would be, for --dry-run) and verified
    1  a needed patch failed, a file drifted, a probe it depends on is unknown,
       or --verify found a problem
    2  environment problem: vLLM or speculators missing, editable or read-only
       install, corrupt manifest, lock held
"""

from __future__ import annotations

import json
from pathlib import Path

from .registry import Decision
from .surface import Surface

OK, PATCH_PROBLEM, ENVIRONMENT = 0, 1, 2
BLOCKING = ("failed", "drifted", "unknown-surface", "needed")


def exit_code(decisions: list[Decision], problems: list[str] = ()) -> int:
    if any(d.verdict in BLOCKING for d in decisions) or problems:
        return PATCH_PROBLEM
    return OK


def header(surface: Surface) -> list[str]:
    lines = []
    for module, info in surface.packages.items():
        if info is None:
            lines.append(f"{module:12} not installed")
            continue
        commit = f" (commit {info['commit']})" if info.get("commit") else ""
        lines.append(f"{module:12} {info['name']} {info['version']}{commit}")
    variant = surface.values.get("speculators.generator")
    lines.append(f"generator    {variant if isinstance(variant, str) else 'unknown'}")
    lines.append(f"surface      {surface.fingerprint()}")
    return lines


def table(decisions: list[Decision]) -> list[str]:
    width = max((len(d.patch.id) for d in decisions), default=10)
    lines = [f"{'PATCH':{width}}  {'VERDICT':16} REASON"]
    for d in decisions:
        lines.append(f"{d.patch.id:{width}}  {d.verdict:16} {d.reason}")
    return lines


def summary(decisions: list[Decision]) -> str:
    counts: dict[str, int] = {}
    for d in decisions:
        counts[d.verdict] = counts.get(d.verdict, 0) + 1
    return ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))


def document(mode: str, surface: Surface | None, decisions: list[Decision], **extra) -> dict:
    return {
        "schema": 1,
        "mode": mode,
        "surface": surface.as_json() if surface else None,
        "patches": [d.as_json() for d in decisions],
        **extra,
    }


def write_json(path: str | None, doc: dict) -> None:
    if path:
        Path(path).write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
