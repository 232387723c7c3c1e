"""Revert covers every file the state names; a file without a RECORD-proven backup restores
nothing, keeps the state and exits 1; the state goes only once every file matches RECORD again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit import toy
from tests.unit.test_apply_hardening import cli, no_traceback, site, snapshot, template  # noqa: F401



def test_revert_with_one_backup_missing_restores_nothing_keeps_the_state_and_exits_1(site):
    from compat.layout import SPECULATORS_CONFIG

    assert cli(site).returncode == 0
    state = next((site / ".specdec-compat").glob("speculators-*"))
    (state / "pristine" / SPECULATORS_CONFIG).unlink()  # one of the three backups is lost
    patched = snapshot(site)
    proc = cli(site, "--revert", "--json")
    no_traceback(proc)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert SPECULATORS_CONFIG in proc.stderr and "no backup" in proc.stderr and "kept" in proc.stderr
    assert json.loads(proc.stdout)["restored"] == []
    assert snapshot(site) == patched  # all or nothing: the two files with a backup stay patched too
    assert (state / "manifest.json").is_file()  # the proof of which bytes are the kit's is kept
    forced = cli(site, "--revert", "--force")
    assert forced.returncode == 1 and snapshot(site) == patched  # --force cannot invent the missing bytes


def test_revert_with_the_backup_folder_gone_keeps_the_manifest(tmp_path):
    import shutil

    from compat.patcher import PatchError

    site = toy.make_site(tmp_path)
    toy.apply(site, {"toy.x", "toy.y"})
    state = site / ".specdec-compat" / "toy-1.0"
    shutil.rmtree(state / "pristine")
    before = toy.snapshot(site)
    with pytest.raises(PatchError, match="toy/a.py.*toy/b.py.*no backup") as info:
        toy.revert(site)
    assert info.value.exit_code == 1
    assert toy.snapshot(site) == before and (state / "manifest.json").is_file()


def test_the_state_goes_only_after_every_file_is_checked_against_record(tmp_path, monkeypatch):
    """A restore that writes other bytes than RECORD's (here injected) keeps the state and exits 1."""
    import compat.state as state_module  # every write of the patcher goes through it
    from compat.patcher import PatchError

    site = toy.make_site(tmp_path)
    toy.apply(site, {"toy.x", "toy.y"})
    real = state_module.atomic_write

    def wrong_bytes(path, data, mode=0o644):
        if Path(path).name == "b.py" and ".specdec-compat" not in Path(path).parts:
            data = data + b"# not RECORD's\n"
        return real(path, data, mode)

    monkeypatch.setattr(state_module, "atomic_write", wrong_bytes)
    with pytest.raises(PatchError, match="toy/b.py still differ"):
        toy.revert(site)
    assert (site / ".specdec-compat" / "toy-1.0" / "manifest.json").is_file()
    assert (site / ".specdec-compat" / "toy-1.0" / "pristine" / "toy" / "b.py").read_bytes() == toy.B
