"""Every record's verdict computed with today's judge from the figures it kept: measured once, judged many times.

Why: a record is stale only when something that decides a *measurement* changed (ci/inputs.py); the bounds and the
rules that call a measurement right or wrong (``inputs.JUDGE_FILES``) change more often, and re-running the matrix
for them (hours on 2 cores) re-measures nothing.  So each record keeps its figures and the coverage page judges them
again here, in seconds:

- a CPU cell's test that judged per-layer errors kept them (``test["figures"]``, compat.shared.figures);
- a GPU scenario set is the raw runs it was judged from (``docs/gpu/records_<set>.json``, ci/gpu/record.judge);
- a GPU serve record is the report it was judged from (compat.serve.judge.rejudge, through
  ci/gpu/record.serve_record);
- a GPU pytest session keeps its tests' figures as a cell does (``python -m ci.gpu record --junit ... --figures``).

A test with no figures keeps its outcome as run; a record with none at all is *not re-judgeable*, and the page says
so where the judge changed since it ran (its verdict is the judge of its day's).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ci import evidence

ROOT = Path(__file__).resolve().parents[1]


@dataclasses.dataclass
class Judged:
    """A record's verdict under today's judge, beside the verdict as run."""

    status: str  # today's (evidence.STATUSES)
    as_run: str  # the record's own
    tests: list[dict]  # each test with today's outcome
    rejudged: int  # how many tests were judged again from kept figures
    moved: list[str]  # the tests whose outcome today's judge moves, "name: as run -> today (why)"

    @property
    def differs(self) -> bool:
        return self.status != self.as_run

    @property
    def rejudgeable(self) -> bool:
        return self.rejudged > 0


def judge_test(test: dict) -> tuple[str, str] | None:
    """(outcome, why) of a CPU test under today's judge from its kept figures; None: it kept none to judge."""
    from compat.shared import figures as figs

    kept = test.get("figures")
    if not kept or test.get("outcome") not in ("passed", "failed"):
        return None  # skipped or errored before it measured: nothing to judge again
    verdicts = []
    for item in kept:
        try:
            verdicts.append(figs.judge(item))
        except (ValueError, KeyError, TypeError):
            return None  # figures of a format this judge does not read: the outcome as run stands
    bad = [why for ok, why in verdicts if not ok]
    return ("failed", bad[0]) if bad else ("passed", verdicts[-1][1])


def _cell(record: evidence.Record) -> Judged:
    tests, rejudged, moved = [], 0, []
    for test in record.tests:
        got = judge_test(test)
        if got is None:
            tests.append(test)
            continue
        rejudged += 1
        outcome, why = got
        if outcome != test["outcome"]:
            moved.append(f"{test['test']}: {test['outcome']} as run -> {outcome} ({why})")
            test = {**test, "outcome": outcome, "message": f"today's judge: {why}"}
        tests.append(test)
    status = record.status
    if moved and record.status in ("pass", "fail"):
        status = evidence.status_of(tests)
    return Judged(status, record.status, tests, rejudged, moved)


def _gpu_tests(record: evidence.Record) -> list[dict] | None:
    """A GPU record's tests judged again from the raw runs or report it names (None: a pytest session, whose
    JUnit file kept outcomes only)."""
    from ci.gpu import record as gpu

    source = record.details.get("source") or ""
    path = ROOT / source
    stamp = {"commit": record.commit, "dirty": record.dirty, "suite": record.suite}
    if source.startswith("docs/gpu/records_") or source == "docs/gpu/pp2_async":
        name = "pp2_async" if source == "docs/gpu/pp2_async" else Path(source).stem.split("_", 1)[1]
        return gpu.set_record(name, stamp, record.name).tests
    if record.path == "serve" and source.endswith(".json") and path.is_file():
        expected = record.details.get("expected", "OK")
        return gpu.serve_record(record.name, path, stamp, expected).tests
    return None


def _gpu(record: evidence.Record) -> Judged:
    try:
        tests = _gpu_tests(record)
    except (OSError, ValueError, KeyError, evidence.RecordError):
        tests = None
    if tests is None:  # a pytest session: its tests' own figures, as a cell's
        return _cell(record)
    was = {t["test"]: t for t in record.tests}
    moved = [f"{t['test']}: {was[t['test']]['outcome']} as run -> {t['outcome']} ({t.get('message', '')[:120]})"
             for t in tests if t["test"] in was and was[t["test"]]["outcome"] != t["outcome"]]
    status = evidence.status_of(tests) if record.status in ("pass", "fail") else record.status
    return Judged(status, record.status, tests, len(tests), moved)


def rejudge(record: evidence.Record) -> Judged:
    """``record`` under today's judge (the record itself is left as it is)."""
    return _gpu(record) if record.kind == "gpu" else _cell(record)


def rejudge_all(records: dict[str, evidence.Record]) -> dict[str, Judged]:
    return {name: rejudge(record) for name, record in records.items()}
