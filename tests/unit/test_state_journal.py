"""The write-ahead record's edge cases: a file changed after the crash, leftovers of staging, old manifests."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from compat import exit_policy
from compat.apply import run_targets
from compat.patcher import PatchError, Patcher, open_target
from fixtures.synthetic import make_dist
from tests.unit import toy
from tests.unit import test_sigkill
from tests.unit.test_sigkill import N, Y_FILES, _child, _snapshot, apply, decisions, expected, pristine

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


# -- an open record whose writer still runs is "running", not "interrupted" ----------------------------------


def _reopen(site, pid: int, started_at: str) -> None:
    """Give the site's open write-ahead record another writer (pid and start time), as a live apply has."""
    path = site / ".specdec-compat/big-1.0/manifest.json"
    data = json.loads(path.read_text())
    data["pending"].update(pid=pid, started_at=started_at)
    path.write_text(json.dumps(data))


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def test_a_record_whose_writer_still_runs_is_reported_running_not_interrupted(tmp_path):
    site = _interrupted(tmp_path)
    before = _snapshot(site)
    writer = subprocess.Popen(["sleep", "60"])  # stands for the apply that is writing
    try:
        time.sleep(1.1)
        _reopen(site, writer.pid, _utc(time.time()))  # opened after the writer started, as apply does
        patcher = Patcher(open_target("big", site))
        plan = patcher.plan(decisions({"big.x"}))
        assert plan.interrupted is None and f"pid {writer.pid}" in (plan.running or ""), plan
        verification = patcher.verify(decisions({"big.x"}))
        assert not any("interrupted" in p for p in verification.problems), verification.problems
        assert verification.plan.running
        outcome = run_targets("dry-run", decisions({"big.x"}), "fp", site)
        assert [p.kind for p in outcome.problems if "right now" in p.text] == ["environment"]
        assert exit_policy.decide("dry-run", outcome.decisions, outcome.problems).code == 2
    finally:
        writer.kill()
        writer.wait()
    assert "interrupted apply" in (Patcher(open_target("big", site)).plan(decisions({"big.x"})).interrupted or "")
    assert _snapshot(site) == before


def test_a_reused_pid_is_not_taken_for_the_writer(tmp_path):
    """The writer died long ago and its pid now belongs to a process that started after the record was opened."""
    site = _interrupted(tmp_path)
    other = subprocess.Popen(["sleep", "60"])
    try:
        _reopen(site, other.pid, _utc(time.time() - 3600))
        plan = Patcher(open_target("big", site)).plan(decisions({"big.x"}))
        assert plan.running is None and "interrupted apply" in (plan.interrupted or "")
    finally:
        other.kill()
        other.wait()
