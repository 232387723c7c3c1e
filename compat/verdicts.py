"""The verdict life-cycle of a patch, in one place, on immutable decisions.

::

    registry.judge      surface -> out-of-range | unknown-surface | not-needed | known-loss | needed
    verdicts.exclude    needed  -> excluded                      (--exclude ID)
    verdicts.on_files   needed  -> apply | already-applied | drifted | failed
                        every decision also learns what is on disk (``on_disk``)

Each step returns new :class:`Decision` objects and never re-marks one in
place, so a report always shows the verdict of the step that produced it, and
a caller can re-plan from the same decisions as often as it likes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Sequence

from .declaration import Patch
from .exit_policy import PROBLEM_VERDICTS, Word


class Verdict(Word):
    """Every verdict a patch's decision can carry, at every step of the life-cycle."""

    NEEDED = "needed"
    NOT_NEEDED = "not-needed"
    KNOWN_LOSS = "known-loss"
    OUT_OF_RANGE = "out-of-range"
    UNKNOWN_SURFACE = "unknown-surface"
    EXCLUDED = "excluded"
    APPLY = "apply"
    ALREADY_APPLIED = "already-applied"
    DRIFTED = "drifted"
    FAILED = "failed"


#: Verdicts of the surface step (registry.judge).
SURFACE = (Verdict.NEEDED, Verdict.NOT_NEEDED, Verdict.KNOWN_LOSS, Verdict.OUT_OF_RANGE, Verdict.UNKNOWN_SURFACE)
#: Verdicts of the file step (what the patcher found for a ``needed`` patch).
FILES = (Verdict.APPLY, Verdict.ALREADY_APPLIED, Verdict.DRIFTED, Verdict.FAILED)
#: What a report may show: every verdict but ``needed``, which the file step always turns into another
VERDICTS = (Verdict.APPLY, Verdict.ALREADY_APPLIED, Verdict.NOT_NEEDED, Verdict.KNOWN_LOSS, Verdict.EXCLUDED,
            Verdict.OUT_OF_RANGE, Verdict.UNKNOWN_SURFACE, Verdict.DRIFTED, Verdict.FAILED)
#: known-loss: this generator has the bug and the kit no patch for it; the install works except under the
#: condition the declaration names (``Patch.known_loss``), which plan and apply print.
#: A decision left in one of these makes apply write nothing and exit 1.
BLOCKING = tuple(PROBLEM_VERDICTS)  # the exit-code policy's problem verdicts: one list, one meaning
#: What a patch's edits are on disk: all its files carry them, none, some, or we cannot tell.
ON_DISK = ("applied", "not applied", "excluded", "partial", "unknown")


@dataclass(frozen=True)
class Decision:
    """One patch's verdict at one step of the life-cycle (immutable)."""

    patch: Patch
    verdict: Verdict  # one of SURFACE before the file step, then one of VERDICTS; a string is made the Verdict
    reason: str
    variant: str | None = None
    on_disk: str | None = None  # one of ON_DISK once the patcher looked (None: the patch has no files here)

    def __post_init__(self):
        object.__setattr__(self, "verdict", Verdict(self.verdict))  # ValueError on a word no step gives
        if self.on_disk is not None and self.on_disk not in ON_DISK:
            raise ValueError(f"{self.patch.id}: on_disk {self.on_disk!r} is not one of {', '.join(ON_DISK)}")

    def as_json(self) -> dict:
        return {
            "id": self.patch.id,
            "title": self.patch.title,
            "target": self.patch.target,
            "verdict": self.verdict,
            "reason": self.reason,
            "on_disk": self.on_disk,
            "upstream": self.patch.upstream,
            "files": list(self.patch.files(self.variant)) if self.variant else [],
            "fails_when": self.patch.known_loss.get(self.variant) if self.verdict == "known-loss" else None,
            "user_proof": self.patch.user_proof or None,
        }


def unknown_ids(decisions: Iterable[Decision], ids: Iterable[str]) -> list[str]:
    known = {d.patch.id for d in decisions}
    return sorted(set(ids) - known)


def exclude(decisions: Sequence[Decision], ids: Iterable[str]) -> tuple[Decision, ...]:
    """``needed`` -> ``excluded`` for the given ids (which must all name a patch)."""
    ids = set(ids)
    bad = unknown_ids(decisions, ids)
    if bad:
        raise ValueError(f"unknown patch id(s): {', '.join(bad)}")
    return tuple(
        replace(d, verdict="excluded", reason="left out with --exclude") if d.patch.id in ids and d.verdict == "needed"
        else d
        for d in decisions
    )


@dataclass(frozen=True)
class FileView:
    """What the patcher found in one file, as the life-cycle needs it."""

    relpath: str
    problem: str | None = None  # why the file cannot be patched
    problem_verdict: str = "drifted"  # "drifted" (content unproven) or "failed" (link, encoding, line endings)
    on_disk: frozenset[str] | None = frozenset()  # patch ids whose edits the file carries; None: cannot tell
    foreign: bool = False  # changed by something other than this kit


def disk_state(patch_id: str, views: Sequence[FileView], excluded_before: bool) -> str | None:
    if not views:
        return None
    if any(v.on_disk is None for v in views):
        return "unknown"
    carrying = [patch_id in v.on_disk for v in views]
    if all(carrying):
        return "applied"
    if any(carrying):
        return "partial"
    return "excluded" if excluded_before else "not applied"


def on_files(decision: Decision, views: Sequence[FileView], failure: str | None, excluded_before: bool) -> Decision:
    """The file step: a ``needed`` decision becomes apply / already-applied / drifted / failed.

    ``failure`` is an edit or compile error of this patch; ``excluded_before``
    says the last apply left this patch out on purpose.  Every decision gets
    its ``on_disk`` state.
    """
    on_disk = disk_state(decision.patch.id, views, excluded_before)
    if decision.verdict != "needed":
        return replace(decision, on_disk=on_disk)
    unusable = next((v for v in views if v.problem and v.problem_verdict == "failed"), None)
    drift = next((v for v in views if v.problem and v.problem_verdict == "drifted"), None)
    if failure is not None:
        return replace(decision, verdict="failed", reason=failure, on_disk=on_disk)
    if unusable is not None:
        return replace(decision, verdict="failed", reason=unusable.problem, on_disk=on_disk)
    if drift is not None:
        return replace(decision, verdict="drifted", reason=drift.problem, on_disk=on_disk)
    if on_disk == "applied":
        return replace(decision, verdict="already-applied", on_disk=on_disk)
    foreign = next((v for v in views if v.foreign), None)
    if foreign is not None:
        reason = f"{foreign.relpath} was changed by something other than this kit"
        return replace(decision, verdict="drifted", reason=reason, on_disk=on_disk)
    reason = decision.reason
    if on_disk == "excluded":
        reason = f"{reason}; the last apply left it out (--exclude)"
    return replace(decision, verdict="apply", reason=reason, on_disk=on_disk)


def blocking(decisions: Iterable[Decision]) -> list[Decision]:
    return [d for d in decisions if d.verdict in BLOCKING]


def known_losses(decisions: Iterable[Decision]) -> str:
    """The plan answer's tail for each known-loss: where this install still fails (``; but it fails at ...``)."""
    return "".join(f"; but it fails at {d.patch.known_loss[d.variant]} ({d.patch.id}: no patch for "
                   f"{d.patch.variant_probe}={d.variant})" for d in decisions if d.verdict == "known-loss")
