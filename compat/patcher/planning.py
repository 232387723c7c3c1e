"""The file step: what each file is now, what it should become, and the verdict every decision gets from that.

Reads only.  A plan holds the composed bytes of every file it would write, so
:mod:`compat.patcher.applying` writes exactly what was planned.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from .. import textfile, verdicts
from ..state import Manifest, writer_running
from ..target import Target
from ..verdicts import Decision, FileView
from . import disk, record
from .compose import compose


@dataclass
class FileState:
    """One file as the plan sees it."""

    relpath: str
    current: bytes | None = None
    pristine: bytes | None = None
    desired: bytes | None = None
    problem: str | None = None
    problem_verdict: str = "drifted"
    patches: list[str] = field(default_factory=list)  # needed patches that edit it
    on_disk: frozenset[str] | None = frozenset()
    foreign: bool = False

    @property
    def wanted(self) -> bytes | None:
        """What apply leaves here: the composition of the needed patches, or pristine."""
        return self.desired if self.patches else self.pristine

    def view(self) -> FileView:
        return FileView(self.relpath, self.problem, self.problem_verdict, self.on_disk, self.foreign)


@dataclass(frozen=True)
class Plan:
    """The decisions after the file step, the per-file states behind them, and what a run wrote."""

    decisions: tuple[Decision, ...]
    files: dict[str, FileState]
    interrupted: str | None = None  # an earlier run's write-ahead record is still open, its writer gone
    running: str | None = None  # another process is writing right now (its write-ahead record is open)
    stale: tuple[str, ...] = ()  # files we patched whose pristine copy can no longer be proven
    written: tuple[str, ...] = ()

    @property
    def blocked(self) -> bool:
        return bool(verdicts.blocking(self.decisions)) or bool(self.stale)

    def decision(self, patch_id: str) -> Decision:
        return next(d for d in self.decisions if d.patch.id == patch_id)


def plan(target: Target, decisions: Sequence[Decision], manifest: Manifest) -> Plan:
    """The file step for every decision; reads, never writes."""
    decisions = tuple(decisions)
    needed = [d for d in decisions if d.verdict == "needed"]
    relpaths = sorted({f for d in decisions if d.variant for f in d.patch.files(d.variant)} | set(manifest.files))
    states = {relpath: _file_state(target, relpath, needed, manifest) for relpath in relpaths}
    failed: dict[str, str] = {}
    for state in states.values():
        if state.patches and state.pristine is not None and state.problem is None:
            _compose_file(state, needed, failed)
    excluded_before = set(manifest.excluded)
    resolved = []
    for decision in decisions:
        files = decision.patch.files(decision.variant) if decision.variant else ()
        views = [states[f].view() for f in files]
        resolved.append(verdicts.on_files(decision, views, failed.get(decision.patch.id),
                                          decision.patch.id in excluded_before))
    stale = tuple(s.relpath for s in states.values() if s.problem and s.relpath in manifest.files and not s.patches)
    return Plan(tuple(resolved), states, interrupted(target, manifest), running(manifest), stale)


def _file_state(target: Target, relpath: str, needed: Sequence[Decision], manifest: Manifest) -> FileState:
    state = FileState(relpath, patches=[d.patch.id for d in needed if relpath in d.patch.files(d.variant)])
    link = disk.link_problem(target, relpath)
    if link:
        state.problem, state.problem_verdict, state.on_disk = link, "failed", None
        return state
    state.current = disk.read(target, relpath)
    state.pristine, state.problem = record.pristine(target, relpath, state.current)
    if state.current is None:
        state.on_disk = None
    elif state.current == state.pristine:
        state.on_disk = frozenset()
    else:
        carried = manifest.carried(relpath, disk.sha256(state.current))
        state.on_disk = frozenset(carried) if carried is not None else None
        state.foreign = disk.sha256(state.current) not in manifest.known(relpath)
    return state


def _compose_file(state: FileState, needed: Sequence[Decision], failed: dict[str, str]) -> None:
    try:
        text, style = textfile.decode(state.pristine, state.relpath)
        composed, errors = compose(text, needed, state.relpath)
        state.desired = textfile.encode(composed, style, state.relpath)
    except textfile.TextProblem as exc:
        state.problem, state.problem_verdict = str(exc), "failed"
        return
    for pid, error in errors.items():
        failed.setdefault(pid, error)
    if state.current is not None and state.current == state.desired and state.on_disk is None:
        state.on_disk, state.foreign = frozenset(state.patches), False


def interrupted(target: Target, manifest: Manifest) -> str | None:
    """An open write-ahead record whose writer is gone: the next apply or revert finishes it."""
    pending = manifest.pending
    if not pending or writer_running(pending):
        return None
    total = len(pending["files"])
    done = sum(1 for rel, e in pending["files"].items() if disk.sha_now(target, rel) == e["after_sha256"])
    return (f"an interrupted {pending['action']} (started {pending.get('started_at', '?')}) left {done} of "
            f"{total} file(s) written; the next `compat apply` or `compat apply --revert` finishes it first")


def running(manifest: Manifest) -> str | None:
    """An open write-ahead record whose writer still runs: the files are in flux, not broken."""
    pending = manifest.pending
    if not pending or not writer_running(pending):
        return None
    return (f"a {pending['action']} (pid {pending.get('pid')}, started {pending.get('started_at', '?')}) is "
            f"writing {len(pending['files'])} file(s) right now; what is on disk is in flux: try again when it ends")
