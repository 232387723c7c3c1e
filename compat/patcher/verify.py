"""Verify: what the manifest says was applied is on disk (sha256, markers, compiles); what is needed now is too.

Reads only.  Every finding is a problem except what the user asked for
(``--exclude``) or what a plain ``compat apply`` would remove.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import textfile
from ..state import Manifest
from ..target import Target
from ..verdicts import Decision
from . import disk
from .planning import Plan


@dataclass(frozen=True)
class Verification:
    plan: Plan
    problems: tuple[str, ...]
    notes: tuple[str, ...]


def verify(target: Target, manifest: Manifest, plan: Plan) -> Verification:
    """Check what the manifest says was applied; say separately what is needed now."""
    problems, notes = [], []
    if plan.interrupted:
        problems.append(plan.interrupted)
    for relpath, entry in manifest.files.items():
        data = disk.read(target, relpath)
        if data is None:
            problems.append(f"{relpath}: missing")
            continue
        if disk.sha256(data) != entry["patched_sha256"]:
            problems.append(f"{relpath}: sha256 differs from what apply wrote")
        try:
            compile(textfile.normalised(data), relpath, "exec", dont_inherit=True)
        except SyntaxError as exc:
            problems.append(f"{relpath}: does not compile: {exc}")
    by_id = {d.patch.id: d for d in plan.decisions}
    applied = set(manifest.applied) | {d.patch.id for d in plan.decisions if d.verdict == "already-applied"}
    for pid in sorted(applied):
        decision = by_id.get(pid)
        if decision is None:
            notes.append(f"{pid}: applied by an earlier version of this kit, which no longer declares it")
            continue
        if not decision.variant:
            notes.append(f"{pid}: applied, now {decision.verdict} ({decision.reason}); `compat apply` removes it")
            continue
        problems.extend(_missing_markers(target, decision))
    for d in plan.decisions:
        if d.verdict == "apply" and d.on_disk == "excluded":
            problems.append(f"{d.patch.id}: needed and not on disk: the last apply left it out (--exclude "
                            f"{d.patch.id}); `compat apply` adds it, `--verify --exclude {d.patch.id}` accepts "
                            f"its absence")
        elif d.verdict == "excluded" and d.on_disk in ("excluded", "not applied"):
            notes.append(f"{d.patch.id}: needed, not on disk, left out on purpose (--exclude)")
        elif d.verdict == "apply":
            problems.append(f"{d.patch.id}: needed and not applied (run `compat apply`)")
        elif d.verdict in ("not-needed", "out-of-range") and d.on_disk in ("applied", "partial"):
            notes.append(f"{d.patch.id}: applied but no longer needed; `compat apply` removes it")
    return Verification(plan, tuple(problems), tuple(notes))


def _missing_markers(target: Target, decision: Decision) -> list[str]:
    problems = []
    for relpath, markers in decision.patch.expected_markers(decision.variant).items():
        data = disk.read(target, relpath)
        current = textfile.normalised(data) if data is not None else ""
        for marker in markers:
            if marker not in current:
                first = marker.strip().splitlines()[0] if marker.strip() else marker
                problems.append(f"{decision.patch.id}: {relpath} lacks {first!r}")
                break
    return problems
