"""RECORD-proven pristine bytes: the wheel's sha256 in RECORD is the only proof this kit trusts.

A file is pristine when its bytes hash to RECORD's entry, either as it is on
disk or as the backup the first apply made of it; anything else is a drift.
"""

from __future__ import annotations

from typing import Iterable

from ..target import Target
from .disk import read_path, sha256, sha_now


def pristine(target: Target, relpath: str, current: bytes | None) -> tuple[bytes | None, str | None]:
    """The pristine bytes of ``relpath``, proven against RECORD, or a problem."""
    expected = target.record.get(relpath)
    if expected is None:
        return None, f"{relpath} has no sha256 in {target.name}'s RECORD; cannot prove a pristine copy"
    if current is not None and sha256(current) == expected:
        return current, None
    backup = target.backup(relpath)
    if backup.is_file():
        data = read_path(backup)
        if sha256(data) == expected:
            return data, None
        return None, f"backup {backup} does not match RECORD sha256 {expected[:12]}"
    return None, f"{relpath} matches neither RECORD sha256 {expected[:12]} nor a backup we made (drifted)"


def differing(target: Target, relpaths: Iterable[str]) -> list[str]:
    """The files among ``relpaths`` that RECORD lists and whose bytes on disk are not RECORD's (missing ones aside)."""
    return [rel for rel in relpaths if rel in target.record and sha_now(target, rel) not in (None, target.record[rel])]


def backups(target: Target) -> set[str]:
    """Every file this kit holds a backup of (proven or not: the caller checks)."""
    root = target.state_dir / "pristine"
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()} if root.is_dir() else set()
