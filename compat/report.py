"""Reports: a table for people, JSON for CI, and the exit-code contract.

Exit codes, the same for every command (``compat apply``, ``plan``, ...):

    0  OK             everything needed is applied (or would be, for --dry-run) and verified
    1  PATCH_PROBLEM  a needed patch failed, a file drifted, a probe a patch depends on is
                      unknown, or --verify found a problem
    2  ENVIRONMENT    environment problem: package missing, editable or read-only install,
                      ambiguous copies, unreadable or corrupt state, lock held or unopenable,
                      any OSError; nothing was changed
    3  UNSUPPORTED    nothing to patch: the installed (or named) speculators has no
                      hidden-states generator this kit knows (speculators >= 0.5 generates
                      hidden states through `vllm serve` and vLLM's own extract_hidden_states)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from .verdicts import BLOCKING, Decision

if TYPE_CHECKING:
    from .surface import Surface

OK, PATCH_PROBLEM, ENVIRONMENT, UNSUPPORTED = 0, 1, 2, 3


def exit_code(decisions: Sequence[Decision], problems: Sequence[str] = ()) -> int:
    if any(d.verdict in BLOCKING for d in decisions) or problems:
        return PATCH_PROBLEM
    return OK


def header(surface: "Surface") -> list[str]:
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


QUIET = ("not-needed", "out-of-range")


def table(decisions: Sequence[Decision], brief: bool = False) -> list[str]:
    """One line per patch: the verdict (what apply does now) and what is on disk.

    ``brief`` leaves out patches with nothing to do and nothing on disk (one line counts them),
    so a screen shows what matters; the JSON document always lists every patch."""
    shown = [d for d in decisions if not (brief and d.verdict in QUIET and d.on_disk in (None, "not applied"))]
    width = max((len(d.patch.id) for d in decisions), default=10)
    lines = [f"{'PATCH':{width}}  {'VERDICT':16} {'ON DISK':12} REASON"]
    for d in shown:
        lines.append(f"{d.patch.id:{width}}  {d.verdict:16} {d.on_disk or '-':12} {d.reason}")
    if len(shown) < len(decisions):
        lines.append(f"({len(decisions) - len(shown)} patch(es) not needed here and not on disk are not listed; "
                     f"drop --brief to see them)")
    return lines


def summary(decisions: Sequence[Decision]) -> str:
    counts: dict[str, int] = {}
    for d in decisions:
        counts[d.verdict] = counts.get(d.verdict, 0) + 1
    return ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))


def document(mode: str, surface: "Surface | None", decisions: Sequence[Decision], **extra) -> dict:
    return {
        "schema": 1,
        "mode": mode,
        "surface": surface.as_json() if surface else None,
        "patches": [d.as_json() for d in decisions],
        **extra,
    }


def render(doc: dict) -> str:
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def write_json(path: str | None, doc: dict) -> None:
    if path:
        Path(path).write_text(render(doc))


def emit(lines: Sequence[str], doc: dict, as_json: bool = False, json_file: str | None = None) -> None:
    """The shared JSON convention: ``--json`` prints the document instead of the lines; ``--json-file`` adds it."""
    if as_json:
        sys.stdout.write(render(doc))
    else:
        for line in lines:
            print(line)
    write_json(json_file, doc)
