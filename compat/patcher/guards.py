"""Can this run write here at all?  Checked before the first byte moves, so a refusal changes nothing."""

from __future__ import annotations

import os
import stat
import tempfile
from contextlib import contextmanager
from typing import Iterable

from filelock import FileLock, Timeout

from ..errors import EnvironmentProblem
from ..state import make_dirs
from ..target import Target


def _read_only_fs(path) -> bool:
    return bool(os.statvfs(path).f_flag & os.ST_RDONLY)


def preflight(target: Target) -> None:
    """Refuse an editable or read-only install before anything else."""
    if target.editable:
        raise EnvironmentProblem(
            f"{target.name} {target.version} is an editable install ({target.site}); refusing to patch a working "
            f"tree. Install it normally, or patch your checkout by hand."
        )
    try:
        read_only = _read_only_fs(target.site) or not os.access(target.site, os.W_OK)
    except OSError as exc:
        raise EnvironmentProblem(f"cannot inspect {target.site}: {exc}. Nothing was changed.") from exc
    if read_only:
        raise EnvironmentProblem(f"{target.site} is read-only; cannot patch {target.name}. Nothing was changed.")


def check_writable(target: Target, relpaths: Iterable[str]) -> None:
    """Every file we are about to replace, and its directory, can be replaced: checked before the first write.

    A directory is proven by creating (and removing) a temporary file in
    it, which catches read-only mounts, immutable flags and ACLs alike.
    """
    directories = {target.state_dir if target.state_dir.exists() else target.state_root}
    for relpath in relpaths:
        path = target.path(relpath)
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
                                     f"{target.name}. Nothing was changed.")
    for directory in sorted(directories):
        try:
            if _read_only_fs(directory):
                raise OSError(30, "read-only file system")
            fd, probe = tempfile.mkstemp(dir=directory, prefix=".specdec-compat-probe.")
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            raise EnvironmentProblem(
                f"cannot write in {directory}: {exc.strerror or exc}; cannot patch {target.name}. "
                f"Nothing was changed."
            ) from exc


@contextmanager
def locked(target: Target, timeout: float):
    """The site's lock file, held for a whole apply or revert: concurrent runs take turns."""
    lock_path = target.state_root / ".lock"
    try:
        make_dirs(target.state_root)
        lock = FileLock(str(lock_path), timeout=timeout, mode=0o644)
        lock.acquire()
    except Timeout as exc:
        raise EnvironmentProblem(f"another apply holds {exc.lock_file}; try again") from exc
    except OSError as exc:
        raise EnvironmentProblem(
            f"cannot open the lock file {lock_path}: {exc.strerror or exc}. Run as the user who owns "
            f"{target.state_root}. Nothing was changed."
        ) from exc
    try:
        yield
    finally:
        lock.release()
