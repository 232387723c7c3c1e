"""Revert: every file the state names, and every file the kit's patches may touch, back to RECORD's bytes.

All or nothing: a file without a RECORD-proven backup restores nothing and
keeps the state (the proof of which bytes were the kit's); the state goes
only once every file matches RECORD again (:func:`compat.patcher.journal.drop_state`).
"""

from __future__ import annotations

from typing import Callable

from ..errors import EnvironmentProblem, PatchError
from ..state import Manifest
from ..target import Target
from . import disk, journal, record


def revert(target: Target, load_manifest: Callable[[], Manifest], force: bool, watched: tuple[str, ...]) -> list[str]:
    """Restore byte-identical pristine files and drop the state (call under the lock).  Returns what was written.

    With ``force`` an unusable manifest is passed over: the backups and RECORD
    alone decide, and files changed by something else are restored too.
    """
    try:
        manifest = load_manifest()
        known_by_file = {rel: manifest.known(rel) for rel in manifest.files}
    except EnvironmentProblem:
        if not force:
            raise EnvironmentProblem(f"the manifest in {target.state_dir} cannot be used, so this kit cannot tell its "
                                     f"own bytes from a drift; use --force to restore the RECORD-proven backups")
        manifest = Manifest(target.manifest_path, target.name, target.version)
        known_by_file = {}
    backups = record.backups(target)
    ours = set(manifest.files) | set((manifest.pending or {}).get("files", {})) | backups
    writes, pristine, unproven = {}, {}, []
    for relpath in sorted(ours | set(watched)):
        expected = target.record.get(relpath)
        if expected is None:
            if relpath in backups:
                raise PatchError(f"backup {target.backup(relpath)} has no RECORD entry in {target.name}; refusing "
                                 f"to write it back unchecked. Nothing was restored.")
            if relpath in ours:
                unproven.append(f"{relpath} (no sha256 in RECORD)")
            continue
        link = disk.link_problem(target, relpath)
        if link:
            raise PatchError(link)
        current = disk.read(target, relpath)
        if current is not None and disk.sha256(current) == expected:
            continue
        data = disk.read_path(target.backup(relpath)) if relpath in backups else None
        if data is None or disk.sha256(data) != expected:
            why = "its backup does not match RECORD" if data is not None else "there is no backup of it"
            unproven.append(f"{relpath} ({why})")
            continue
        if not (current is None or disk.sha256(current) in known_by_file.get(relpath, set())) and not force:
            raise PatchError(f"{relpath} was changed by something other than this kit; use --force to restore anyway")
        writes[relpath] = (current, data)
        pristine[relpath] = data
    if unproven:
        kept = (f"the patcher state in {target.state_dir} is kept" if target.state_dir.exists() else
                f"there is no patcher state in {target.state_dir} to restore from")
        raise PatchError(
            f"{', '.join(unproven)}: differ(s) from {target.name} {target.version}'s RECORD and this kit holds no "
            f"RECORD-proven copy to restore. Nothing was restored; {kept}. Reinstall it: "
            f"pip install --force-reinstall --no-deps {target.name}=={target.version}"
        )
    journal.run(target, manifest, "revert", writes, pristine, None, check=sorted(ours | set(watched)))
    return sorted(writes)
