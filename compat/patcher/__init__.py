"""The source patcher: pristine-based, anchored, compiled, atomic, journaled, locked, revertible.

Every apply starts from the pristine file (the wheel's bytes, proven by the
RECORD sha256, backed up the first time), so re-applying after a vLLM upgrade
yields exactly the patch set the new surface needs.  Before the first byte of
a package file moves, every target file and directory is checked and the
intended result is recorded (:mod:`compat.state`), so a run is all or
nothing even when it is killed: the next run finishes it.

The modules, in the order a run meets them::

    guards     can this run write here (editable, read-only, lock)
    record     RECORD-proven pristine bytes and backups
    compose    the needed patches' edits on a file's pristine text
    planning   the file step: per-file state and each decision's verdict (reads only)
    applying   a plan that nothing blocks -> the manifest's next state and the writes
    journal    write-ahead execution and recovery of an interrupted run
    verify     what was applied is on disk, what is needed is applied
    revert     every file back to RECORD's bytes, or nothing
    disk       the target's files as bytes (every read and write)

State lives beside the distribution (``<site-packages>/.specdec-compat/``);
the verdicts come from :mod:`compat.verdicts`.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from ..errors import EnvironmentProblem, PatchError
from ..state import Manifest
from ..target import Target, open_target
from ..verdicts import Decision
from . import guards, journal, planning
from .applying import apply_plan
from .compose import compose
from .disk import sha256
from .planning import FileState, Plan
from .revert import revert as revert_files
from .verify import Verification, verify as verify_files

__all__ = ["EnvironmentProblem", "FileState", "PatchError", "Patcher", "Plan", "Target", "Verification",
           "compose", "open_target", "sha256"]


class Patcher:
    """Plans, applies, verifies and reverts the patches of one target distribution."""

    def __init__(self, target: Target, lock_timeout: float = 120.0):
        self.target = target
        self.lock_timeout = lock_timeout

    def preflight(self) -> None:
        guards.preflight(self.target)

    def check_writable(self, relpaths: Iterable[str]) -> None:
        guards.check_writable(self.target, relpaths)

    def locked(self):
        return guards.locked(self.target, self.lock_timeout)

    def manifest(self) -> Manifest:
        return Manifest.load(self.target.manifest_path, self.target.name, self.target.version)

    def plan(self, decisions: Sequence[Decision], manifest: Manifest | None = None) -> Plan:
        """The file step for every decision; reads, never writes."""
        return planning.plan(self.target, decisions, self.manifest() if manifest is None else manifest)

    def apply(self, decisions: Sequence[Decision], surface_fingerprint: str) -> Plan:
        """Apply the needed patches; all or nothing.  Returns the plan, with ``written``."""
        self.preflight()
        with self.locked():
            self.recover()
            manifest = self.manifest()
            return apply_plan(self.target, manifest, self.plan(decisions, manifest), surface_fingerprint)

    def recover(self) -> list[str]:
        """Finish a run that was interrupted after its write-ahead record (call under the lock)."""
        return journal.recover(self.target, self.manifest())

    def verify(self, decisions: Sequence[Decision]) -> Verification:
        """Check what the manifest says was applied; say separately what is needed now.  Reads only."""
        manifest = self.manifest()
        return verify_files(self.target, manifest, self.plan(decisions, manifest))

    def revert(self, force: bool = False, watched: Iterable[str] = ()) -> list[str]:
        """Restore byte-identical pristine files and drop our state.

        ``watched`` are the files this kit's patches may touch: any of them
        differing from RECORD without a proven backup is reported, not passed over.
        """
        self.preflight()
        with self.locked():
            try:
                self.recover()
            except PatchError:
                if not force:
                    raise
            return revert_files(self.target, self.manifest, force, tuple(watched))
