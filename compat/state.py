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

import calendar
import copy
import json
import os
import re
import tempfile
import time
from pathlib import Path, PurePosixPath

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


_SHA256 = re.compile(r"[0-9a-f]{64}")
_TOP = {"schema", "dist", "version", "files", "patches", "excluded", "pending", "surface_fingerprint", "written_at"}
_FILE = {"pristine_sha256", "patched_sha256", "known_sha256", "patches"}
_PENDING = {"action", "started_at", "pid", "files", "state"}
_STATE = {"files", "patches", "excluded", "surface_fingerprint"}


def _check(data) -> None:
    """Raise ValueError, naming the field, unless ``data`` is a manifest in every field and type.

    Every mode reads the manifest, and the revert and the recovery write files
    where it points, so a wrong type must be a clear refusal before any use
    (and a path must stay inside the site), never a traceback halfway.
    """
    _object(data, "manifest", _TOP, required={"schema", "files"})
    if type(data["schema"]) is not int or data["schema"] not in READABLE:
        raise ValueError(f"schema: expected one of {READABLE}, found {data['schema']!r}")
    for key in ("dist", "version", "surface_fingerprint", "written_at"):
        _optional_str(data, key, key)
    _files(data["files"], "files")
    for key in ("patches", "excluded"):
        if key in data:
            _strings(data[key], key)
    pending = data.get("pending")
    if pending is not None:
        _object(pending, "pending", _PENDING, required={"action", "files"})
        if pending["action"] not in ("apply", "revert"):
            raise ValueError(f"pending.action: expected 'apply' or 'revert', found {pending['action']!r}")
        _optional_str(pending, "started_at", "pending.started_at")
        if "pid" in pending and (type(pending["pid"]) is not int or pending["pid"] <= 0):
            raise ValueError(f"pending.pid: expected a process id, found {pending['pid']!r}")
        _paths(pending["files"], "pending.files")
        for relpath, entry in pending["files"].items():
            where = f"pending.files[{relpath!r}]"
            _object(entry, where, {"before_sha256", "after_sha256"}, required={"before_sha256", "after_sha256"})
            if entry["before_sha256"] is not None:
                _sha(entry["before_sha256"], f"{where}.before_sha256")
            _sha(entry["after_sha256"], f"{where}.after_sha256")
        state = pending.get("state")
        if state is not None:
            _object(state, "pending.state", _STATE, required={"files", "patches", "excluded"})
            _files(state["files"], "pending.state.files")
            _strings(state["patches"], "pending.state.patches")
            _strings(state["excluded"], "pending.state.excluded")
            _optional_str(state, "surface_fingerprint", "pending.state.surface_fingerprint")


def _object(value, where: str, allowed: set[str], required: set[str]) -> None:
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected an object, found {type(value).__name__}")
    missing, unknown = sorted(required - set(value)), sorted(set(value) - allowed)
    if missing:
        raise ValueError(f"{where}: missing {', '.join(missing)}")
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {', '.join(unknown)}")


def _optional_str(value: dict, key: str, where: str) -> None:
    if key in value and not isinstance(value[key], str):
        raise ValueError(f"{where}: expected a string, found {value[key]!r}")


def _strings(value, where: str) -> None:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where}: expected a list of strings, found {value!r}")


def _sha(value, where: str) -> None:
    if not isinstance(value, str) or not _SHA256.fullmatch(value):
        raise ValueError(f"{where}: expected a sha256 hex digest, found {value!r}")


def _paths(value, where: str) -> None:
    """An object keyed by paths relative to the site that stay inside it."""
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected an object, found {type(value).__name__}")
    for relpath in value:
        pure = PurePosixPath(relpath)
        if not relpath or pure.is_absolute() or ".." in pure.parts or "\\" in relpath or pure.as_posix() != relpath:
            raise ValueError(f"{where}: {relpath!r} is not a plain path inside the site")


def _files(value, where: str) -> None:
    _paths(value, where)
    for relpath, entry in value.items():
        at = f"{where}[{relpath!r}]"
        _object(entry, at, _FILE, required=_FILE)
        _sha(entry["pristine_sha256"], f"{at}.pristine_sha256")
        _sha(entry["patched_sha256"], f"{at}.patched_sha256")
        if not isinstance(entry["known_sha256"], list):
            raise ValueError(f"{at}.known_sha256: expected a list, found {entry['known_sha256']!r}")
        for i, sha in enumerate(entry["known_sha256"]):
            _sha(sha, f"{at}.known_sha256[{i}]")
        _strings(entry["patches"], f"{at}.patches")


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


def writer_running(pending: dict) -> bool:
    """Is the process that opened this write-ahead record still running?

    A record is "interrupted" only once its writer is gone: ``--dry-run`` or
    ``--verify`` beside a running apply must not call it dead.  The pid alone
    could have been reused since, so a process that started after the record
    was opened is not its writer (Linux's /proc gives the start time; without
    it the pid decides).
    """
    pid = pending.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, and another user's
    started = _process_start(pid)
    opened = pending.get("started_at")
    if started is None or not isinstance(opened, str):
        return True
    try:
        opened_at = calendar.timegm(time.strptime(opened, "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        return True
    return started <= opened_at + 1  # started_at has one-second resolution


def _process_start(pid: int) -> float | None:
    """Seconds since the epoch at which ``pid`` started, from /proc (None where there is no /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, counted after the command name
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")
