"""The source patcher: pristine-based, anchored, compiled, atomic, locked, revertible.

Every apply starts from the pristine file (the wheel's bytes, proven by the
RECORD sha256, backed up the first time), so re-applying after a vLLM upgrade
yields exactly the patch set the new surface needs.  State lives beside the
distribution::

    <site-packages>/.specdec-compat/<dist>-<version>/manifest.json
    <site-packages>/.specdec-compat/<dist>-<version>/pristine/<relpath>
    <site-packages>/.specdec-compat/.lock
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata as md
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock, Timeout

from . import dists
from .declaration import AnchorError
from .layout import STATE_DIR
from .registry import Decision

MANIFEST_SCHEMA = 1


class PatchError(Exception):
    """A refusal with a clear message; ``exit_code`` follows the CLI's contract."""

    exit_code = 1


class EnvironmentProblem(PatchError):
    exit_code = 2


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def atomic_write(path: Path, data: bytes, mode: int | None = None) -> None:
    """Temp file in the same directory, fsync, rename, fsync the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def clear_bytecode(path: Path) -> None:
    """Drop ``__pycache__/<stem>.*.pyc`` so Python cannot run the old code."""
    cache = path.parent / "__pycache__"
    if cache.is_dir():
        for pyc in cache.glob(f"{path.stem}.*.pyc"):
            pyc.unlink(missing_ok=True)


def _writable(directory: Path) -> bool:
    try:
        if os.statvfs(directory).f_flag & os.ST_RDONLY:
            return False
    except OSError:
        return False
    return os.access(directory, os.W_OK)


@dataclass
class Target:
    """An installed distribution whose files we patch."""

    module: str
    name: str
    version: str
    site: Path
    record: dict[str, str]  # relpath -> sha256 hex from RECORD
    editable: bool

    @property
    def state_root(self) -> Path:
        return self.site / STATE_DIR

    @property
    def state_dir(self) -> Path:
        slug = self.name.lower().replace("-", "_")
        return self.state_root / f"{slug}-{self.version}"

    @property
    def manifest_path(self) -> Path:
        return self.state_dir / "manifest.json"

    def path(self, relpath: str) -> Path:
        return self.site / relpath

    def backup(self, relpath: str) -> Path:
        return self.state_dir / "pristine" / relpath


def _record_hashes(dist: md.Distribution) -> dict[str, str]:
    out = {}
    for file in dist.files or ():
        if file.hash is not None and file.hash.mode == "sha256":
            raw = base64.urlsafe_b64decode(file.hash.value + "=" * (-len(file.hash.value) % 4))
            out[str(file).replace("\\", "/")] = raw.hex()
    return out


def open_target(module: str, site: str | Path | None = None) -> Target:
    dist = dists.find_distribution(module, site)
    if dist is None:
        raise EnvironmentProblem(f"{module} is not installed in this environment (no distribution provides it)")
    info = dists.describe(module, dist)
    return Target(module, info.name, info.version, Path(str(dist.locate_file(""))), _record_hashes(dist), info.editable)


@dataclass
class FileState:
    relpath: str
    pristine: bytes | None = None
    current: bytes | None = None
    desired: bytes | None = None
    problem: str | None = None
    patches: list[str] = field(default_factory=list)


def compose(text: str, decisions: list[Decision], relpath: str) -> tuple[str, dict[str, str]]:
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


class Manifest:
    """What we wrote: per file the pristine sha, patched sha(s) and patch ids."""

    def __init__(self, target: Target):
        self.target = target
        self.data = {"schema": MANIFEST_SCHEMA, "dist": target.name, "version": target.version, "files": {}}

    @classmethod
    def load(cls, target: Target) -> "Manifest":
        manifest = cls(target)
        path = target.manifest_path
        if not path.exists():
            return manifest
        try:
            data = json.loads(path.read_text())
            if not isinstance(data, dict):
                raise ValueError(f"expected a JSON object, found {type(data).__name__}")
            if data.get("schema") != MANIFEST_SCHEMA or not isinstance(data.get("files"), dict):
                raise ValueError("unexpected schema")
            for relpath, entry in data["files"].items():
                if not isinstance(entry, dict):
                    raise ValueError(f"{relpath}: expected an object")
                for key in ("pristine_sha256", "patched_sha256", "known_sha256", "patches"):
                    if key not in entry:
                        raise ValueError(f"{relpath}: missing {key}")
        except (ValueError, OSError) as exc:
            raise EnvironmentProblem(
                f"corrupt manifest {path}: {exc}. Nothing was changed. "
                f"`python -m compat.apply --revert --force` restores the RECORD-proven pristine backups without it."
            ) from exc
        manifest.data = data
        return manifest

    @property
    def files(self) -> dict:
        return self.data["files"]

    def known(self, relpath: str) -> set[str]:
        entry = self.files.get(relpath)
        return set(entry["known_sha256"]) if entry else set()

    def save(self) -> None:
        self.data["written_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        atomic_write(self.target.manifest_path, (json.dumps(self.data, indent=2, sort_keys=True) + "\n").encode())


class Patcher:
    """Applies, verifies and reverts the needed patches on one target distribution."""

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
        if not _writable(t.site):
            raise EnvironmentProblem(f"{t.site} is read-only; cannot patch {t.name}. Nothing was changed.")

    def lock(self) -> FileLock:
        try:
            self.target.state_root.mkdir(exist_ok=True)
        except OSError as exc:
            raise EnvironmentProblem(f"cannot create {self.target.state_root}: {exc}") from exc
        return FileLock(str(self.target.state_root / ".lock"), timeout=self.lock_timeout)

    # -- reading state ---------------------------------------------------------

    def pristine(self, relpath: str) -> bytes:
        """The RECORD-proven pristine bytes of ``relpath`` (raises if they cannot be proven)."""
        data, problem = self._pristine(relpath, self._read(relpath))
        if data is None:
            raise PatchError(problem)
        return data

    def _pristine(self, relpath: str, current: bytes | None) -> tuple[bytes | None, str | None]:
        """The pristine bytes of ``relpath``, proven against RECORD, or a problem."""
        expected = self.target.record.get(relpath)
        if expected is None:
            return None, f"{relpath} has no sha256 in {self.target.name}'s RECORD; cannot prove a pristine copy"
        if current is not None and sha256(current) == expected:
            return current, None
        backup = self.target.backup(relpath)
        if backup.is_file():
            data = backup.read_bytes()
            if sha256(data) == expected:
                return data, None
            return None, f"backup {backup} does not match RECORD sha256 {expected[:12]}"
        return None, f"{relpath} matches neither RECORD sha256 {expected[:12]} nor a backup we made (drifted)"

    def _read(self, relpath: str) -> bytes | None:
        path = self.target.path(relpath)
        return path.read_bytes() if path.is_file() else None

    # -- planning ---------------------------------------------------------------

    def plan(self, decisions: list[Decision], manifest: Manifest) -> dict[str, FileState]:
        """Turn ``needed`` into apply/already-applied/drifted/failed; returns per-file states."""
        states: dict[str, FileState] = {}
        needed = [d for d in decisions if d.verdict == "needed"]
        relpaths = sorted({f for d in needed for f in d.patch.files(d.variant)} | set(manifest.files))
        for relpath in relpaths:
            current = self._read(relpath)
            state = FileState(relpath, current=current)
            state.pristine, state.problem = self._pristine(relpath, current)
            states[relpath] = state
        failed: dict[str, str] = {}
        for relpath, state in states.items():
            if state.pristine is None:
                continue
            text, errors = compose(state.pristine.decode("utf-8"), needed, relpath)
            state.patches = [d.patch.id for d in needed if relpath in d.patch.files(d.variant)]
            for pid, error in errors.items():
                failed.setdefault(pid, error)
            state.desired = text.encode("utf-8")
        for decision in needed:
            files = [states[f] for f in decision.patch.files(decision.variant)]
            drift = [s.problem for s in files if s.problem]
            if decision.patch.id in failed:
                decision.verdict, decision.reason = "failed", failed[decision.patch.id]
            elif drift:
                decision.verdict, decision.reason = "drifted", drift[0]
            elif all(s.current == s.desired for s in files):
                decision.verdict = "already-applied"
            else:
                moved = [s for s in files if s.current not in (s.desired, s.pristine)]
                foreign = [s for s in moved if sha256(s.current or b"") not in manifest.known(s.relpath)]
                if foreign:
                    decision.verdict = "drifted"
                    decision.reason = f"{foreign[0].relpath} was changed by something other than this kit"
                else:
                    decision.verdict = "apply"
        return states

    # -- actions ------------------------------------------------------------------

    def apply(self, decisions: list[Decision], surface_fingerprint: str, dry_run: bool = False) -> list[str]:
        """Apply the needed patches; returns the files written.  All or nothing."""
        if dry_run:
            self.plan(decisions, Manifest.load(self.target))
            return []
        self.preflight()
        try:
            with self.lock():
                return self._apply_locked(decisions, surface_fingerprint)
        except Timeout as exc:
            raise EnvironmentProblem(f"another apply holds {exc.lock_file}; try again") from exc

    def _apply_locked(self, decisions: list[Decision], fingerprint: str) -> list[str]:
        manifest = Manifest.load(self.target)
        states = self.plan(decisions, manifest)
        blocked = [d for d in decisions if d.verdict in ("drifted", "failed", "unknown-surface")]
        stale = [s for s in states.values() if s.problem and s.relpath in manifest.files and not s.patches]
        if blocked or stale:
            return []  # nothing written; the report carries the reasons
        writes = []
        for relpath, state in states.items():
            target_bytes = state.desired if state.patches else state.pristine
            if state.current == target_bytes:
                continue
            writes.append((relpath, state, target_bytes))
        for relpath, state, _ in writes:  # 1. backups of pristine, proven by RECORD
            backup = self.target.backup(relpath)
            if not backup.is_file():
                atomic_write(backup, state.pristine)
        for relpath, state in states.items():  # 2. manifest (intent) before any file moves
            if state.patches:
                known = sorted(manifest.known(relpath) | {sha256(state.desired)})
                manifest.files[relpath] = {
                    "pristine_sha256": sha256(state.pristine),
                    "patched_sha256": sha256(state.desired),
                    "known_sha256": known,
                    "patches": state.patches,
                }
            else:
                manifest.files.pop(relpath, None)
        manifest.data["surface_fingerprint"] = fingerprint
        manifest.data["patches"] = sorted({p for s in states.values() for p in s.patches})
        manifest.save()
        for relpath, state, data in writes:  # 3. atomic replace, then drop bytecode
            path = self.target.path(relpath)
            mode = path.stat().st_mode & 0o7777 if path.exists() else None
            atomic_write(path, data, mode)
            clear_bytecode(path)
        return [w[0] for w in writes]

    def verify(self, decisions: list[Decision]) -> list[str]:
        """Problems found re-checking every postcondition; empty means verified."""
        manifest = Manifest.load(self.target)
        problems = []
        states = self.plan([Decision(d.patch, d.verdict, d.reason, d.variant) for d in decisions], manifest)
        for decision in decisions:
            if decision.verdict != "needed":
                continue
            for relpath, markers in decision.patch.expected_markers(decision.variant).items():
                current = (self._read(relpath) or b"").decode("utf-8", "replace")
                for marker in markers:
                    if marker not in current:
                        first = marker.strip().splitlines()[0] if marker.strip() else marker
                        problems.append(f"{decision.patch.id}: {relpath} lacks {first!r}")
                        break
        for relpath, entry in manifest.files.items():
            data = self._read(relpath)
            if data is None:
                problems.append(f"{relpath}: missing")
                continue
            if sha256(data) != entry["patched_sha256"]:
                problems.append(f"{relpath}: sha256 differs from what apply wrote")
            try:
                compile(data, relpath, "exec", dont_inherit=True)
            except SyntaxError as exc:
                problems.append(f"{relpath}: does not compile: {exc}")
        for relpath, state in states.items():
            if state.patches and state.current != state.desired:
                problems.append(f"{relpath}: not in the state this surface needs (run apply)")
        return problems

    def revert(self, force: bool = False) -> list[str]:
        """Restore byte-identical pristine files and drop our state."""
        self.preflight()
        try:
            with self.lock():
                return self._revert_locked(force)
        except Timeout as exc:
            raise EnvironmentProblem(f"another apply holds {exc.lock_file}; try again") from exc

    def _revert_locked(self, force: bool) -> list[str]:
        state_dir = self.target.state_dir
        root = state_dir / "pristine"
        if not root.is_dir():
            if state_dir.exists():
                shutil.rmtree(state_dir)
            return []
        try:
            known_by_file = {k: set(v.get("known_sha256", [])) for k, v in Manifest.load(self.target).files.items()}
        except EnvironmentProblem:
            known_by_file = {}
        plan = []
        for backup in sorted(p for p in root.rglob("*") if p.is_file()):
            relpath = backup.relative_to(root).as_posix()
            data = backup.read_bytes()
            expected = self.target.record.get(relpath)
            if expected is not None and sha256(data) != expected:
                raise PatchError(f"backup {backup} does not match RECORD; refusing to restore it")
            current = self._read(relpath)
            ours = current is None or current == data or sha256(current) in known_by_file.get(relpath, set())
            if not ours and not force:
                raise PatchError(f"{relpath} was changed by something other than this kit; use --force to restore anyway")
            plan.append((relpath, data, current))
        restored = []
        for relpath, data, current in plan:
            if current != data:
                path = self.target.path(relpath)
                mode = path.stat().st_mode & 0o7777 if path.exists() else None
                atomic_write(path, data, mode)
                clear_bytecode(path)
                restored.append(relpath)
        shutil.rmtree(state_dir)
        return restored
