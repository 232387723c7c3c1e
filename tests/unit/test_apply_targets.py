"""``Patch.target`` decides which distribution a patch edits: one site, two distributions, one apply."""

from __future__ import annotations

from pathlib import Path

from compat.apply import run_targets
from compat.declaration import Edit
from compat.registry import Decision
from fixtures.synthetic import make_dist
from tests.unit import toy

OTHER = b"Z = 1\n"


def _site(root: Path) -> Path:
    site = toy.make_site(root)
    make_dist(site, "other-pkg", "2.0", {"other/__init__.py": b"", "other/z.py": OTHER}, top_level="other")
    return site


def _decisions() -> list[Decision]:
    z = toy.Patch(id="other.z", title="z", why="t", how="t", upstream="-", removal="-", target="other",
                  versions={}, requires={}, edits={"v": {"other/z.py": (Edit("Z = 1\n", "Z = 2\n"),)}})
    return [*toy.decisions({"toy.x"}), Decision(z, "needed", "", "v")]


def test_each_patch_is_applied_to_the_distribution_it_targets(tmp_path):
    site = _site(tmp_path)
    outcome = run_targets("apply", _decisions(), "fp", site)
    assert {d.patch.id: d.verdict for d in outcome.decisions if d.verdict != "not-needed"} == {
        "toy.x": "apply", "other.z": "apply"}
    assert (site / "other/z.py").read_bytes() == b"Z = 2\n"
    assert toy.snapshot(site) == toy.expected({"toy.x"})
    assert (site / ".specdec-compat" / "other_pkg-2.0" / "manifest.json").is_file()
    assert (site / ".specdec-compat" / "toy-1.0" / "manifest.json").is_file()
    assert outcome.problems == []
    again = run_targets("verify", _decisions(), "fp", site)
    assert again.problems == [] and {d.verdict for d in again.decisions if d.verdict != "not-needed"} == {
        "already-applied"}


def test_a_blocked_target_stops_every_target(tmp_path):
    site = _site(tmp_path)
    (site / "other/z.py").write_bytes(b"Z = 99\n")  # drifted: not the RECORD bytes
    outcome = run_targets("apply", _decisions(), "fp", site)
    verdicts = {d.patch.id: d.verdict for d in outcome.decisions}
    assert verdicts["other.z"] == "drifted"
    assert toy.snapshot(site) == toy.PRISTINE  # toy.x was fine, but nothing is written when anything is blocked
    assert not (site / ".specdec-compat" / "toy-1.0").exists()
