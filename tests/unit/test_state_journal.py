"""The write-ahead record's edge cases: a file changed after the crash, leftovers of staging, old manifests."""

from __future__ import annotations

import json
import signal

import pytest

from compat.patcher import PatchError, Patcher, open_target
from fixtures.synthetic import make_dist
from tests.unit import toy
from tests.unit import test_sigkill
from tests.unit.test_sigkill import N, Y_FILES, _child, _snapshot, apply, expected, pristine

tmp_path = test_sigkill.tmp_path  # the tmpfs directory: these tests kill children mid-run too


def _interrupted(tmp_path):
    return test_sigkill.interrupted_re_plan(tmp_path)


def test_a_file_changed_after_the_crash_is_refused_not_overwritten(tmp_path):
    site = _interrupted(tmp_path)
    untouched = next(rel for rel in Y_FILES if (site / rel).read_bytes() != pristine()[rel])
    (site / untouched).write_bytes(b"VALUE = 'edited by hand'\n")
    before = _snapshot(site)
    with pytest.raises(PatchError, match="changed since it started") as info:
        apply(site, {"big.x"})
    assert info.value.exit_code == 1
    assert _snapshot(site) == before
    Patcher(open_target("big", site)).revert(force=True)  # the documented way out
    assert _snapshot(site) == pristine()


def test_a_kill_while_staging_leaves_no_record_and_nothing_moved(tmp_path):
    site = tmp_path / "site"
    make_dist(site, "big", "1.0", pristine())
    apply(site, {"big.x", "big.y"})
    proc = _child(site, {"big.x"}, N // 2)  # some staged copies written, no record yet
    assert proc.returncode == -signal.SIGKILL
    assert (site / ".specdec-compat/big-1.0/pending").is_dir()
    assert _snapshot(site) == expected({"big.x", "big.y"})
    manifest = json.loads((site / ".specdec-compat/big-1.0/manifest.json").read_text())
    assert not manifest.get("pending")
    apply(site, {"big.x"})
    assert _snapshot(site) == expected({"big.x"})
    assert not (site / ".specdec-compat/big-1.0/pending").exists()


def test_a_manifest_written_by_the_first_release_of_the_kit_is_still_read(tmp_path):
    """Schema 1 (no write-ahead record, no excluded list) describes the same committed state."""
    site = toy.make_site(tmp_path)
    toy.apply(site, {"toy.x"})
    path = site / ".specdec-compat/toy-1.0/manifest.json"
    data = json.loads(path.read_text())
    old = {"schema": 1, "dist": data["dist"], "version": data["version"], "files": data["files"],
           "patches": data["patches"], "surface_fingerprint": "fp", "written_at": data["written_at"]}
    path.write_text(json.dumps(old))
    plan = Patcher(open_target("toy", site)).plan(toy.decisions({"toy.x", "toy.y"}))
    assert plan.decision("toy.x").verdict == "already-applied" and plan.decision("toy.y").verdict == "apply"
    toy.apply(site, {"toy.y"})
    assert toy.snapshot(site) == toy.expected({"toy.y"})
