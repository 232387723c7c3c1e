"""Reports: a table for people and JSON for CI.

The exit codes (the same for every command) are decided by :mod:`compat.exit_policy`;
their names are repeated here for the commands that print them.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from .exit_policy import ENVIRONMENT, OK, PATCH_PROBLEM, UNSUPPORTED  # noqa: F401  (re-exported names)
from .verdicts import Decision

if TYPE_CHECKING:
    from .surface import Surface


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


def wrote_json_file(path: str | None, doc: dict) -> bool:
    """Write ``doc`` to --json-file when one is given; False (said on stderr, the OS's reason) when it cannot be
    written, so a plan answers with the environment's exit code rather than a traceback."""
    if not path:
        return True
    try:
        write_json(path, doc)
    except OSError as exc:
        print(f"error: cannot write {path}: {exc}", file=sys.stderr)
        return False
    return True


def unwritable(path: str | None) -> str | None:
    """Why ``path`` cannot take the JSON document, or None.  Asked before any change: a run that could
    not write its report afterwards would have changed files and then failed."""
    if not path:
        return None
    target = Path(path)
    if target.is_dir():
        return f"--json-file {path} is a directory"
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        return f"--json-file {path}: no directory {parent}"
    if target.exists():
        return None if os.access(target, os.W_OK) else f"--json-file {path} is not writable"
    try:
        fd, probe = tempfile.mkstemp(dir=parent, prefix=".compat-json-probe.")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        return f"--json-file {path}: cannot write in {parent}: {exc.strerror or exc}"
    return None


def emit(lines: Sequence[str], doc: dict, as_json: bool = False, json_file: str | None = None) -> None:
    """The shared JSON convention: ``--json`` prints the document instead of the lines; ``--json-file`` adds it."""
    if as_json:
        sys.stdout.write(render(doc))
    else:
        for line in lines:
            print(line)
    write_json(json_file, doc)
