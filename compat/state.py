"""The patcher's state beside a distribution: the manifest and its write-ahead record.

::

    <site-packages>/.specdec-compat/<dist>-<version>/manifest.json
    <site-packages>/.specdec-compat/<dist>-<version>/pristine/<relpath>   RECORD-proven backups
    <site-packages>/.specdec-compat/<dist>-<version>/pending/<relpath>    staged bytes of a run in flight

The manifest holds the committed state (per file: pristine and patched
sha256, the patches it carries; the patches applied and excluded) and, while
a run changes files, a ``pending`` record: every file's sha256 before and
after, plus the state to commit.  That record and the staged bytes are saved
before the first file moves, so the next run can always finish an
interrupted one: a file at its "before" sha gets its staged bytes, a file at
its "after" sha is done, anything else changed under us and is refused.

State files are written 0644 and directories 0755, like the site they sit
in, so another user can read (and dry-run against) what root applied.
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
import time
from pathlib import Path

from .errors import EnvironmentProblem

SCHEMA = 2
READABLE = (1, 2)  # schema 1 (no write-ahead record) is read as a committed state
FILE_MODE, DIR_MODE = 0o644, 0o755


def make_dirs(path: Path, stop: Path | None = None) -> None:
    """``mkdir -p`` that leaves every directory it creates 0755 whatever the umask."""
    missing = []
    while not path.exists() and path != stop and path != path.parent:
        missing.append(path)
        path = path.parent
    for directory in reversed(missing):
        directory.mkdir(exist_ok=True)
        os.chmod(directory, DIR_MODE)


def atomic_write(path: Path, data: bytes, mode: int = FILE_MODE) -> None:
    """Temp file in the same directory, fsync, chmod, rename, fsync the directory."""
    make_dirs(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
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


def _check(data) -> None:
    """Raise ValueError unless ``data`` has the manifest's shape."""
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, found {type(data).__name__}")
    if data.get("schema") not in READABLE or not isinstance(data.get("files"), dict):
        raise ValueError("unexpected schema")
    _check_files(data["files"])
    pending = data.get("pending")
    if pending is not None:
        if not isinstance(pending, dict) or pending.get("action") not in ("apply", "revert"):
            raise ValueError("pending: expected an apply or revert record")
        if not isinstance(pending.get("files"), dict):
            raise ValueError("pending: no files")
        for relpath, entry in pending["files"].items():
            if not isinstance(entry, dict) or "before_sha256" not in entry or "after_sha256" not in entry:
                raise ValueError(f"pending: {relpath}: missing before/after sha256")
        if pending.get("state") is not None:
            _check_files(pending["state"].get("files"))


def _check_files(files) -> None:
    if not isinstance(files, dict):
        raise ValueError("files: expected an object")
    for relpath, entry in files.items():
        if not isinstance(entry, dict):
            raise ValueError(f"{relpath}: expected an object")
        for key in ("pristine_sha256", "patched_sha256", "known_sha256", "patches"):
            if key not in entry:
                raise ValueError(f"{relpath}: missing {key}")


class Manifest:
    """What this kit wrote for one distribution, and what a run in flight is writing."""

    def __init__(self, path: Path, dist: str, version: str):
        self.path = path
        self.data: dict = {"schema": SCHEMA, "dist": dist, "version": version, "files": {}, "patches": [],
                           "excluded": [], "pending": None}

    @classmethod
    def load(cls, path: Path, dist: str, version: str) -> "Manifest":
        """The manifest at ``path`` (empty if there is none).

        Raises :class:`EnvironmentProblem` saying "cannot read" (permissions,
        I/O) or "corrupt" (the bytes are not a manifest) -- they need
        different fixes.
        """
        manifest = cls(path, dist, version)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return manifest
        except OSError as exc:
            raise EnvironmentProblem(
                f"cannot read patcher state {path}: {exc.strerror or exc}. It was probably written by another user "
                f"(e.g. root); run as that user or give this one read access. Nothing was changed."
            ) from exc
        try:
            data = json.loads(raw.decode("utf-8"))
            _check(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise EnvironmentProblem(
                f"corrupt manifest {path}: {exc}. Nothing was changed. "
                f"`python -m compat.apply --revert --force` restores the RECORD-proven pristine backups without it."
            ) from exc
        data.setdefault("patches", [])
        data.setdefault("excluded", [])
        data.setdefault("pending", None)
        manifest.data = data
        return manifest

    # -- the committed state ---------------------------------------------------

    @property
    def files(self) -> dict:
        return self.data["files"]

    @property
    def applied(self) -> list[str]:
        return list(self.data.get("patches", []))

    @property
    def excluded(self) -> list[str]:
        return list(self.data.get("excluded", []))

    def known(self, relpath: str) -> set[str]:
        """Every sha256 this kit ever wrote (or is writing) to ``relpath``."""
        known = set(self.files.get(relpath, {}).get("known_sha256", []))
        pending = self.pending
        if pending:
            entry = pending["files"].get(relpath)
            if entry:
                known |= {s for s in (entry["before_sha256"], entry["after_sha256"]) if s}
        return known

    def carried(self, relpath: str, sha: str) -> list[str] | None:
        """The patches a file with this sha256 carries, if it is a state this kit recorded."""
        candidates = [self.files.get(relpath)]
        if self.pending and self.pending.get("state"):
            candidates.append(self.pending["state"]["files"].get(relpath))
        for entry in candidates:
            if entry and entry["patched_sha256"] == sha:
                return list(entry["patches"])
        return None

    # -- the write-ahead record ------------------------------------------------

    @property
    def pending(self) -> dict | None:
        return self.data.get("pending")

    def next_state(self, files: dict, excluded: list[str], fingerprint: str) -> dict:
        return {
            "files": files,
            "patches": sorted({p for entry in files.values() for p in entry["patches"]}),
            "excluded": sorted(excluded),
            "surface_fingerprint": fingerprint,
        }

    def begin(self, action: str, files: dict[str, tuple[str | None, str]], state: dict | None) -> None:
        """Record intent: per file the sha256 before and after, and the state to commit (None: drop it)."""
        self.data["pending"] = {
            "action": action,
            "started_at": _now(),
            "pid": os.getpid(),
            "files": {rel: {"before_sha256": b, "after_sha256": a} for rel, (b, a) in sorted(files.items())},
            "state": copy.deepcopy(state),
        }

    def commit(self) -> None:
        """The pending state becomes the committed one."""
        pending = self.data.get("pending") or {}
        state = pending.get("state")
        if state is not None:
            self.data.update(copy.deepcopy(state))
        self.data["pending"] = None

    def abort(self) -> None:
        self.data["pending"] = None

    def save(self) -> None:
        self.data["schema"] = SCHEMA
        self.data["written_at"] = _now()
        atomic_write(self.path, (json.dumps(self.data, indent=2, sort_keys=True) + "\n").encode())


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
