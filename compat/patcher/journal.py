"""Write-ahead execution: the one way any file of the target changes, all or nothing even under SIGKILL.

1. RECORD-proven pristine backups, 2. the staged bytes of the result, 3. the
write-ahead record (every file's sha256 before and after), 4. the files,
5. commit (or, after a revert, drop the state once every file is RECORD's
again).  A run killed after step 3 is finished by :func:`recover`.
"""

from __future__ import annotations

import shutil
from typing import Sequence

from .. import state
from ..errors import EnvironmentProblem, PatchError
from ..state import Manifest
from ..target import Target
from . import disk, record
from .guards import check_writable

Writes = dict[str, tuple[bytes | None, bytes]]  # relpath -> (bytes before, bytes after)


def run(target: Target, manifest: Manifest, action: str, writes: Writes, pristine: dict[str, bytes],
        next_state: dict | None, check: Sequence[str] = ()) -> None:
    """Write-ahead, then move the files, then commit.

    ``check``: with ``next_state`` None (a revert), the files that must match RECORD before the state goes."""
    if not writes:
        if next_state is None:
            drop_state(target, manifest, check)
        else:
            manifest.begin(action, {}, next_state)
            manifest.commit()
            _save(manifest)
        return
    check_writable(target, writes)
    try:
        for relpath in writes:  # 1. RECORD-proven pristine backups
            backup = target.backup(relpath)
            if not backup.is_file() and pristine.get(relpath) is not None:
                state.atomic_write(backup, pristine[relpath])
        for relpath, (_, after) in writes.items():  # 2. staged bytes of the result
            state.atomic_write(target.staged(relpath), after)
        shas = {rel: (disk.sha256(before) if before is not None else None, disk.sha256(after))
                for rel, (before, after) in writes.items()}
        manifest.begin(action, shas, next_state)
        manifest.save()  # 3. the write-ahead record: from here on the next run can finish us
    except OSError as exc:
        shutil.rmtree(target.state_dir / "pending", ignore_errors=True)
        raise EnvironmentProblem(f"cannot write patcher state in {target.state_dir}: {exc}. "
                                 f"No package file was changed.") from exc
    done = []
    try:
        for relpath, (_, after) in writes.items():  # 4. the files, keeping their mode
            disk.replace(target, relpath, after)
            done.append(relpath)
    except OSError as exc:
        _roll_back(target, manifest, writes, done, exc)
    _finish(target, manifest, check)


def _roll_back(target: Target, manifest: Manifest, writes: Writes, done: list[str], exc: OSError) -> None:
    try:
        for relpath in reversed(done):
            before = writes[relpath][0]
            if before is not None:
                disk.replace(target, relpath, before)
        manifest.abort()
        manifest.save()
        shutil.rmtree(target.state_dir / "pending", ignore_errors=True)
    except OSError as again:
        raise EnvironmentProblem(
            f"writing {target.name} failed ({exc}) and so did undoing it ({again}); the write-ahead "
            f"record in {manifest.path} lets the next `compat apply` finish the run."
        ) from exc
    raise EnvironmentProblem(f"writing {target.name} failed: {exc}. Every file was put back; "
                             f"nothing was changed.") from exc


def _finish(target: Target, manifest: Manifest, check: Sequence[str] = ()) -> None:
    """Commit the pending state (or drop all state after a revert)."""
    if (manifest.pending or {}).get("state") is None:
        drop_state(target, manifest, check)
        return
    manifest.commit()
    _save(manifest)
    shutil.rmtree(target.state_dir / "pending", ignore_errors=True)


def drop_state(target: Target, manifest: Manifest, check: Sequence[str]) -> None:
    """Delete the state after a revert, once every file in ``check`` is back at RECORD's bytes."""
    still = record.differing(target, check)
    if still:
        if manifest.pending:
            manifest.abort()
            _save(manifest)
        raise PatchError(f"after the revert {', '.join(still)} still differ(s) from {target.name}'s RECORD; the "
                         f"patcher state in {target.state_dir} is kept")
    shutil.rmtree(target.state_dir, ignore_errors=True)


def _save(manifest: Manifest) -> None:
    try:
        manifest.save()
    except OSError as exc:
        raise EnvironmentProblem(f"cannot write {manifest.path}: {exc}") from exc


def recover(target: Target, manifest: Manifest) -> list[str]:
    """Finish a run that was interrupted after its write-ahead record (call under the lock)."""
    pending = manifest.pending
    staging = target.state_dir / "pending"
    if not pending:
        if staging.exists():  # killed while staging, before the record: nothing moved
            shutil.rmtree(staging, ignore_errors=True)
        return []
    writes = {}
    for relpath, entry in pending["files"].items():
        now = disk.sha_now(target, relpath)
        if now == entry["after_sha256"]:
            continue
        if now != entry["before_sha256"]:
            raise PatchError(
                f"an interrupted {pending['action']} cannot be finished: {relpath} changed since it started "
                f"(sha256 {str(now)[:12]}). Nothing was changed; `compat apply --revert --force` restores pristine."
            )
        staged = target.staged(relpath)
        data = disk.read_path(staged) if staged.is_file() else None
        if data is None or disk.sha256(data) != entry["after_sha256"]:
            raise EnvironmentProblem(f"the staged copy {staged} of an interrupted run is missing or damaged; "
                                     f"`compat apply --revert --force` restores pristine.")
        writes[relpath] = data
    check_writable(target, writes)
    for relpath in pending["files"]:  # temp files of the killed atomic writes
        path = target.path(relpath)
        for leftover in path.parent.glob(f".{path.name}.*.tmp"):
            leftover.unlink(missing_ok=True)
    try:
        for relpath, data in writes.items():
            disk.replace(target, relpath, data)
    except OSError as exc:
        raise EnvironmentProblem(f"cannot finish the interrupted run: {exc}; nothing else was changed") from exc
    _finish(target, manifest, sorted(set(manifest.files) | set(pending["files"])))
    return sorted(writes)
