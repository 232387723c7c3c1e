"""Reports of ``apply`` and ``plan``: the header and the verdict table people read, and the JSON document.

The exit codes (the same for every command) are decided by :mod:`compat.exit_policy`;
their names are repeated here for the commands that print them.  Every command writes
its lines and document through :class:`compat.output.Output`.
"""

from __future__ import annotations

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
