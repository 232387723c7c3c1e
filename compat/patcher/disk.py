"""The target's files as bytes: read, hash, replace keeping the mode.  Every read or write of a package file
goes through here, so an OSError is always a clear :class:`EnvironmentProblem` and a link is never followed."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from .. import state
from ..errors import EnvironmentProblem
from ..target import Target


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_path(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise EnvironmentProblem(f"cannot read {path}: {exc.strerror or exc}. Nothing was changed.") from exc


def read(target: Target, relpath: str) -> bytes | None:
    path = target.path(relpath)
    if not path.is_file():
        return None
    return read_path(path)


def sha_now(target: Target, relpath: str) -> str | None:
    data = read(target, relpath)
    return sha256(data) if data is not None else None


def link_problem(target: Target, relpath: str) -> str | None:
    path = target.path(relpath)
    if path.is_symlink():
        return (f"{relpath} is a symbolic link (to {os.readlink(path)}); this kit does not replace links "
                f"(revert could not restore it). Reinstall {target.name} without links to patch it.")
    return None


def clear_bytecode(path: Path) -> None:
    """Drop ``__pycache__/<stem>.*.pyc`` so Python cannot run the old code."""
    cache = path.parent / "__pycache__"
    if cache.is_dir():
        for pyc in cache.glob(f"{path.stem}.*.pyc"):
            pyc.unlink(missing_ok=True)


def replace(target: Target, relpath: str, data: bytes) -> None:
    """Atomically replace a package file, keeping its mode, and drop its stale bytecode."""
    path = target.path(relpath)
    mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else 0o644
    state.atomic_write(path, data, mode)
    clear_bytecode(path)
