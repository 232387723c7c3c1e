"""The source patcher: pristine-based, anchored, compiled, atomic, journaled, locked, revertible.

Every apply starts from the pristine file (the wheel's bytes, proven by the
RECORD sha256, backed up the first time), so re-applying after a vLLM upgrade
yields exactly the patch set the new surface needs.  Before the first byte of
a package file moves, every target file and directory is checked and the
intended result is recorded (:mod:`compat.state`), so a run is all or
nothing even when it is killed: the next run finishes it.

State lives beside the distribution (``<site-packages>/.specdec-compat/``);
the verdicts come from :mod:`compat.verdicts`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from filelock import FileLock, Timeout

from . import textfile, verdicts
from .declaration import AnchorError
from .errors import EnvironmentProblem, PatchError
from .state import Manifest, atomic_write, make_dirs, writer_running
from .target import Target, open_target
from .verdicts import Decision, FileView

__all__ = ["EnvironmentProblem", "PatchError", "Patcher", "Plan", "Target", "open_target", "compose", "sha256"]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def clear_bytecode(path: Path) -> None:
    """Drop ``__pycache__/<stem>.*.pyc`` so Python cannot run the old code."""
    cache = path.parent / "__pycache__"
    if cache.is_dir():
        for pyc in cache.glob(f"{path.stem}.*.pyc"):
            pyc.unlink(missing_ok=True)


def _read_only_fs(path: Path) -> bool:
    return bool(os.statvfs(path).f_flag & os.ST_RDONLY)


def compose(text: str, decisions: Sequence[Decision], relpath: str) -> tuple[str, dict[str, str]]:
    """Apply, in registry order, every decision's edits for ``relpath`` to pristine ``text``.

    Returns the composed text and ``{patch id: error}`` for edits whose anchor
    did not match exactly once, or for a result that does not compile.
    """
    errors: dict[str, str] = {}
    touching = [d for d in decisions if relpath in d.patch.files(d.variant)]
    for decision in touching:
        for edit in decision.patch.edits[decision.variant][relpath]:
            try:
                text = edit.apply(text, f"{decision.patch.id} {relpath}")
            except AnchorError as exc:
                errors.setdefault(decision.patch.id, str(exc))
    try:
        compile(text, relpath, "exec", dont_inherit=True)
    except SyntaxError as exc:
        for decision in touching:
            errors.setdefault(decision.patch.id, f"{relpath} does not compile after patching: {exc}")
    return text, errors


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


@dataclass(frozen=True)
class Verification:
    plan: Plan
    problems: tuple[str, ...]
    notes: tuple[str, ...]


class Patcher:
    """Plans, applies, verifies and reverts the patches of one target distribution."""

    def __init__(self, target: Target, lock_timeout: float = 120.0):
        self.target = target
        self.lock_timeout = lock_timeout

    # -- preflight -------------------------------------------------------------

    def preflight(self) -> None:
        t = self.target
        if t.editable:
            raise EnvironmentProblem(
                f"{t.name} {t.version} is an editable install ({t.site}); refusing to patch a working tree. "
                f"Install it normally, or patch your checkout by hand."
            )
        try:
            read_only = _read_only_fs(t.site) or not os.access(t.site, os.W_OK)
        except OSError as exc:
            raise EnvironmentProblem(f"cannot inspect {t.site}: {exc}. Nothing was changed.") from exc
        if read_only:
            raise EnvironmentProblem(f"{t.site} is read-only; cannot patch {t.name}. Nothing was changed.")

    def check_writable(self, relpaths: Iterable[str]) -> None:
        """Every file we are about to replace, and its directory, can be replaced: checked before the first write.

        A directory is proven by creating (and removing) a temporary file in
        it, which catches read-only mounts, immutable flags and ACLs alike.
        """
        directories = {self.target.state_dir if self.target.state_dir.exists() else self.target.state_root}
        for relpath in relpaths:
            path = self.target.path(relpath)
            directories.add(path.parent)
            try:
                info = path.lstat()
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise EnvironmentProblem(f"cannot inspect {path}: {exc}. Nothing was changed.") from exc
            if not stat.S_ISREG(info.st_mode):
                raise EnvironmentProblem(f"{path} is not a regular file; refusing to replace it. Nothing was changed.")
            if not os.access(path, os.W_OK):  # also false for root on an immutable (chattr +i) file
                raise EnvironmentProblem(f"{path} is not writable (read-only or immutable); cannot patch "
                                         f"{self.target.name}. Nothing was changed.")
        for directory in sorted(directories):
            try:
                if _read_only_fs(directory):
                    raise OSError(30, "read-only file system")
                fd, probe = tempfile.mkstemp(dir=directory, prefix=".specdec-compat-probe.")
                os.close(fd)
                os.unlink(probe)
            except OSError as exc:
                raise EnvironmentProblem(
                    f"cannot write in {directory}: {exc.strerror or exc}; cannot patch {self.target.name}. "
                    f"Nothing was changed."
                ) from exc

    @contextmanager
    def locked(self):
        lock_path = self.target.state_root / ".lock"
        try:
            make_dirs(self.target.state_root)
            lock = FileLock(str(lock_path), timeout=self.lock_timeout, mode=0o644)
            lock.acquire()
        except Timeout as exc:
            raise EnvironmentProblem(f"another apply holds {exc.lock_file}; try again") from exc
        except OSError as exc:
            raise EnvironmentProblem(
                f"cannot open the lock file {lock_path}: {exc.strerror or exc}. Run as the user who owns "
                f"{self.target.state_root}. Nothing was changed."
            ) from exc
        try:
            yield
        finally:
            lock.release()

    # -- reading state ---------------------------------------------------------

    def manifest(self) -> Manifest:
        return Manifest.load(self.target.manifest_path, self.target.name, self.target.version)

    def _pristine(self, relpath: str, current: bytes | None) -> tuple[bytes | None, str | None]:
        """The pristine bytes of ``relpath``, proven against RECORD, or a problem."""
        expected = self.target.record.get(relpath)
        if expected is None:
            return None, f"{relpath} has no sha256 in {self.target.name}'s RECORD; cannot prove a pristine copy"
        if current is not None and sha256(current) == expected:
            return current, None
        backup = self.target.backup(relpath)
        if backup.is_file():
            data = self._read_path(backup)
            if sha256(data) == expected:
                return data, None
            return None, f"backup {backup} does not match RECORD sha256 {expected[:12]}"
        return None, f"{relpath} matches neither RECORD sha256 {expected[:12]} nor a backup we made (drifted)"

    def _read_path(self, path: Path) -> bytes:
        try:
            return path.read_bytes()
        except OSError as exc:
            raise EnvironmentProblem(f"cannot read {path}: {exc.strerror or exc}. Nothing was changed.") from exc

    def _read(self, relpath: str) -> bytes | None:
        path = self.target.path(relpath)
        if not path.is_file():
            return None
        return self._read_path(path)

    def _link_problem(self, relpath: str) -> str | None:
        path = self.target.path(relpath)
        if path.is_symlink():
            return (f"{relpath} is a symbolic link (to {os.readlink(path)}); this kit does not replace links "
                    f"(revert could not restore it). Reinstall {self.target.name} without links to patch it.")
        return None

    # -- planning ----------------------------------------------------------------

    def plan(self, decisions: Sequence[Decision], manifest: Manifest | None = None) -> Plan:
        """The file step for every decision; reads, never writes."""
        manifest = self.manifest() if manifest is None else manifest
        decisions = tuple(decisions)
        needed = [d for d in decisions if d.verdict == "needed"]
        relpaths = sorted({f for d in decisions if d.variant for f in d.patch.files(d.variant)} | set(manifest.files))
        states = {relpath: self._file_state(relpath, needed, manifest) for relpath in relpaths}
        failed: dict[str, str] = {}
        for state in states.values():
            if state.patches and state.pristine is not None and state.problem is None:
                self._compose_file(state, needed, failed)
        excluded_before = set(manifest.excluded)
        resolved = []
        for decision in decisions:
            files = decision.patch.files(decision.variant) if decision.variant else ()
            views = [self._view(states[f]) for f in files]
            resolved.append(verdicts.on_files(decision, views, failed.get(decision.patch.id),
                                              decision.patch.id in excluded_before))
        stale = tuple(s.relpath for s in states.values() if s.problem and s.relpath in manifest.files and not s.patches)
        return Plan(tuple(resolved), states, self._interrupted(manifest), running=self._running(manifest), stale=stale)

    def _file_state(self, relpath: str, needed: Sequence[Decision], manifest: Manifest) -> FileState:
        state = FileState(relpath, patches=[d.patch.id for d in needed if relpath in d.patch.files(d.variant)])
        link = self._link_problem(relpath)
        if link:
            state.problem, state.problem_verdict, state.on_disk = link, "failed", None
            return state
        state.current = self._read(relpath)
        state.pristine, state.problem = self._pristine(relpath, state.current)
        if state.current is None:
            state.on_disk = None
        elif state.current == state.pristine:
            state.on_disk = frozenset()
        else:
            carried = manifest.carried(relpath, sha256(state.current))
            state.on_disk = frozenset(carried) if carried is not None else None
            state.foreign = sha256(state.current) not in manifest.known(relpath)
        return state

    def _compose_file(self, state: FileState, needed: Sequence[Decision], failed: dict[str, str]) -> None:
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

    @staticmethod
    def _view(state: FileState) -> FileView:
        return FileView(state.relpath, state.problem, state.problem_verdict, state.on_disk, state.foreign)

    def _interrupted(self, manifest: Manifest) -> str | None:
        pending = manifest.pending
        if not pending or writer_running(pending):
            return None
        total = len(pending["files"])
        done = sum(1 for rel, e in pending["files"].items() if self._sha_now(rel) == e["after_sha256"])
        return (f"an interrupted {pending['action']} (started {pending.get('started_at', '?')}) left {done} of "
                f"{total} file(s) written; the next `compat apply` or `compat apply --revert` finishes it first")

    @staticmethod
    def _running(manifest: Manifest) -> str | None:
        pending = manifest.pending
        if not pending or not writer_running(pending):
            return None
        return (f"a {pending['action']} (pid {pending.get('pid')}, started {pending.get('started_at', '?')}) is "
                f"writing {len(pending['files'])} file(s) right now; what is on disk is in flux: try again when it ends")

    def _sha_now(self, relpath: str) -> str | None:
        data = self._read(relpath)
        return sha256(data) if data is not None else None

    # -- actions -------------------------------------------------------------------

    def apply(self, decisions: Sequence[Decision], surface_fingerprint: str) -> Plan:
        """Apply the needed patches; all or nothing.  Returns the plan, with ``written``."""
        self.preflight()
        with self.locked():
            self.recover()
            return self._apply_locked(tuple(decisions), surface_fingerprint)

    def _apply_locked(self, decisions: tuple[Decision, ...], fingerprint: str) -> Plan:
        manifest = self.manifest()
        plan = self.plan(decisions, manifest)
        if plan.blocked:
            return plan  # nothing written; the report carries the reasons
        files = {}
        for relpath, state in plan.files.items():
            if state.patches:
                files[relpath] = {
                    "pristine_sha256": sha256(state.pristine),
                    "patched_sha256": sha256(state.desired),
                    "known_sha256": sorted(manifest.known(relpath) | {sha256(state.desired)}),
                    "patches": state.patches,
                }
        excluded = [d.patch.id for d in decisions if d.verdict == "excluded"]
        next_state = manifest.next_state(files, excluded, fingerprint)
        writes = {rel: (s.current, s.wanted) for rel, s in plan.files.items()
                  if s.wanted is not None and s.current != s.wanted and (s.patches or rel in manifest.files)}
        self._run(manifest, "apply", writes, {rel: plan.files[rel].pristine for rel in writes}, next_state)
        return Plan(plan.decisions, plan.files, None, plan.stale, written=tuple(sorted(writes)))

    def _run(self, manifest: Manifest, action: str, writes: dict[str, tuple[bytes | None, bytes]],
             pristine: dict[str, bytes], next_state: dict | None, check: Sequence[str] = ()) -> None:
        """Write-ahead, then move the files, then commit: the one way any file of the target changes.

        ``check``: with ``next_state`` None (a revert), files that must match RECORD before the state goes."""
        if not writes:
            if next_state is None:
                self._drop_state(manifest, check)
            else:
                manifest.begin(action, {}, next_state)
                manifest.commit()
                self._save(manifest)
            return
        self.check_writable(writes)
        try:
            for relpath in writes:  # 1. RECORD-proven pristine backups
                backup = self.target.backup(relpath)
                if not backup.is_file() and pristine.get(relpath) is not None:
                    atomic_write(backup, pristine[relpath])
            for relpath, (_, after) in writes.items():  # 2. staged bytes of the result
                atomic_write(self.target.staged(relpath), after)
            shas = {rel: (sha256(before) if before is not None else None, sha256(after))
                    for rel, (before, after) in writes.items()}
            manifest.begin(action, shas, next_state)
            manifest.save()  # 3. the write-ahead record: from here on the next run can finish us
        except OSError as exc:
            shutil.rmtree(self.target.state_dir / "pending", ignore_errors=True)
            raise EnvironmentProblem(f"cannot write patcher state in {self.target.state_dir}: {exc}. "
                                     f"No package file was changed.") from exc
        done = []
        try:
            for relpath, (_, after) in writes.items():  # 4. the files, keeping their mode
                self._replace(relpath, after)
                done.append(relpath)
        except OSError as exc:
            self._roll_back(manifest, writes, done, exc)
        self._finish(manifest, check)

    def _replace(self, relpath: str, data: bytes) -> None:
        path = self.target.path(relpath)
        mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else 0o644
        atomic_write(path, data, mode)
        clear_bytecode(path)

    def _roll_back(self, manifest: Manifest, writes, done: list[str], exc: OSError) -> None:
        try:
            for relpath in reversed(done):
                before = writes[relpath][0]
                if before is not None:
                    self._replace(relpath, before)
            manifest.abort()
            manifest.save()
            shutil.rmtree(self.target.state_dir / "pending", ignore_errors=True)
        except OSError as again:
            raise EnvironmentProblem(
                f"writing {self.target.name} failed ({exc}) and so did undoing it ({again}); the write-ahead "
                f"record in {manifest.path} lets the next `compat apply` finish the run."
            ) from exc
        raise EnvironmentProblem(f"writing {self.target.name} failed: {exc}. Every file was put back; "
                                 f"nothing was changed.") from exc

    def _finish(self, manifest: Manifest, check: Sequence[str] = ()) -> None:
        """Commit the pending state (or drop all state after a revert)."""
        if (manifest.pending or {}).get("state") is None:
            self._drop_state(manifest, check)
            return
        manifest.commit()
        self._save(manifest)
        shutil.rmtree(self.target.state_dir / "pending", ignore_errors=True)

    def _drop_state(self, manifest: Manifest, check: Sequence[str]) -> None:
        """Delete the state after a revert, once every file in ``check`` is back at RECORD's bytes."""
        differing = [rel for rel in check if rel in self.target.record
                     and self._sha_now(rel) not in (None, self.target.record[rel])]
        if differing:
            if manifest.pending:
                manifest.abort()
                self._save(manifest)
            raise PatchError(f"after the revert {', '.join(differing)} still differ(s) from {self.target.name}'s "
                             f"RECORD; the patcher state in {self.target.state_dir} is kept")
        shutil.rmtree(self.target.state_dir, ignore_errors=True)

    def _save(self, manifest: Manifest) -> None:
        try:
            manifest.save()
        except OSError as exc:
            raise EnvironmentProblem(f"cannot write {manifest.path}: {exc}") from exc

    def recover(self) -> list[str]:
        """Finish a run that was interrupted after its write-ahead record (call under the lock)."""
        manifest = self.manifest()
        pending = manifest.pending
        staging = self.target.state_dir / "pending"
        if not pending:
            if staging.exists():  # killed while staging, before the record: nothing moved
                shutil.rmtree(staging, ignore_errors=True)
            return []
        writes = {}
        for relpath, entry in pending["files"].items():
            now = self._sha_now(relpath)
            if now == entry["after_sha256"]:
                continue
            if now != entry["before_sha256"]:
                raise PatchError(
                    f"an interrupted {pending['action']} cannot be finished: {relpath} changed since it started "
                    f"(sha256 {str(now)[:12]}). Nothing was changed; `compat apply --revert --force` restores pristine."
                )
            staged = self.target.staged(relpath)
            data = self._read_path(staged) if staged.is_file() else None
            if data is None or sha256(data) != entry["after_sha256"]:
                raise EnvironmentProblem(f"the staged copy {staged} of an interrupted run is missing or damaged; "
                                         f"`compat apply --revert --force` restores pristine.")
            writes[relpath] = data
        self.check_writable(writes)
        for relpath in pending["files"]:  # temp files of the killed atomic writes
            path = self.target.path(relpath)
            for leftover in path.parent.glob(f".{path.name}.*.tmp"):
                leftover.unlink(missing_ok=True)
        try:
            for relpath, data in writes.items():
                self._replace(relpath, data)
        except OSError as exc:
            raise EnvironmentProblem(f"cannot finish the interrupted run: {exc}; nothing else was changed") from exc
        self._finish(manifest)
        return sorted(writes)

    def verify(self, decisions: Sequence[Decision]) -> Verification:
        """Check what the manifest says was applied; say separately what is needed now.  Reads only."""
        manifest = self.manifest()
        plan = self.plan(decisions, manifest)
        problems, notes = [], []
        if plan.interrupted:
            problems.append(plan.interrupted)
        for relpath, entry in manifest.files.items():
            data = self._read(relpath)
            if data is None:
                problems.append(f"{relpath}: missing")
                continue
            if sha256(data) != entry["patched_sha256"]:
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
            problems.extend(self._missing_markers(decision))
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

    def _missing_markers(self, decision: Decision) -> list[str]:
        problems = []
        for relpath, markers in decision.patch.expected_markers(decision.variant).items():
            data = self._read(relpath)
            current = textfile.normalised(data) if data is not None else ""
            for marker in markers:
                if marker not in current:
                    first = marker.strip().splitlines()[0] if marker.strip() else marker
                    problems.append(f"{decision.patch.id}: {relpath} lacks {first!r}")
                    break
        return problems

    def revert(self, force: bool = False, watched: Iterable[str] = ()) -> list[str]:
        """Restore byte-identical pristine files and drop our state.

        ``watched`` are the files this kit's patches may touch: with no state
        to restore from, any of them differing from RECORD is reported, not
        passed over.
        """
        self.preflight()
        with self.locked():
            try:
                self.recover()
            except PatchError:
                if not force:
                    raise
            return self._revert_locked(force, tuple(watched))

    def _revert_locked(self, force: bool, watched: tuple[str, ...]) -> list[str]:
        """Every file the state names (manifest, backups, a pending run) and every watched file ends at RECORD's
        bytes, or nothing is restored and the state stays: a file without a RECORD-proven backup cannot be
        put back by this kit, and dropping the state would lose the proof of which bytes were ours."""
        root = self.target.state_dir / "pristine"
        try:
            manifest = self.manifest()
            known_by_file = {rel: manifest.known(rel) for rel in manifest.files}
        except EnvironmentProblem:
            if not force:
                raise EnvironmentProblem(f"the manifest in {self.target.state_dir} cannot be used, so this kit cannot "
                                         f"tell its own bytes from a drift; use --force to restore the RECORD-proven "
                                         f"backups")
            manifest = Manifest(self.target.manifest_path, self.target.name, self.target.version)
            known_by_file = {}
        backups = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()} if root.is_dir() else set()
        ours = set(manifest.files) | set((manifest.pending or {}).get("files", {})) | backups
        writes, pristine, unproven = {}, {}, []
        for relpath in sorted(ours | set(watched)):
            expected = self.target.record.get(relpath)
            if expected is None:
                if relpath in backups:
                    raise PatchError(f"backup {self.target.backup(relpath)} has no RECORD entry in {self.target.name}; "
                                     f"refusing to write it back unchecked. Nothing was restored.")
                if relpath in ours:
                    unproven.append(f"{relpath} (no sha256 in RECORD)")
                continue
            link = self._link_problem(relpath)
            if link:
                raise PatchError(link)
            current = self._read(relpath)
            if current is not None and sha256(current) == expected:
                continue
            data = self._read_path(self.target.backup(relpath)) if relpath in backups else None
            if data is None or sha256(data) != expected:
                where = "its backup does not match RECORD" if data is not None else "there is no backup of it"
                unproven.append(f"{relpath} ({where})")
                continue
            if not (current is None or sha256(current) in known_by_file.get(relpath, set())) and not force:
                raise PatchError(f"{relpath} was changed by something other than this kit; use --force to restore "
                                 f"anyway")
            writes[relpath] = (current, data)
            pristine[relpath] = data
        if unproven:
            state = (f"the patcher state in {self.target.state_dir} is kept" if self.target.state_dir.exists() else
                     f"there is no patcher state in {self.target.state_dir} to restore from")
            raise PatchError(
                f"{', '.join(unproven)}: differ(s) from {self.target.name} {self.target.version}'s RECORD and this "
                f"kit holds no RECORD-proven copy to restore. Nothing was restored; {state}. Reinstall it: "
                f"pip install --force-reinstall --no-deps {self.target.name}=={self.target.version}"
            )
        self._run(manifest, "revert", writes, pristine, None, check=sorted(ours | set(watched)))
        return sorted(writes)
