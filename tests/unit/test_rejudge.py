"""Measured once, judged many times: a change to the judge stales no cell and re-judges every record from its figures.

Expected values from the bounds' own documented measurements (compat/shared/tolerance.py's bases), not from the
code under test: vLLM float32 against HF float32 on CPU stays near 1e-5 and a bf16 downcast is 4e-2 to 7e-2 per layer;
float32 on an H200 (TF32 attention) measured up to 6.7e-3 (docs/gpu/records_a-e.json, the f set's ok_fp32 included).
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import pytest

from ci import coverage, evidence, inputs, refresh, table
from ci import judge as ci_judge
from ci.gpu import record as gpu_record
from compat.shared import figures, tolerance

ROOT = Path(__file__).resolve().parents[2]
DATA = table.load()
TOLERANCE = "compat/shared/tolerance.py"
HIDDEN = "tests/contract/test_hidden_states.py::test_hidden_states_equal_hf_at_every_layer"


BASE = inputs.Inputs()  # every file read once: a checkout others edit meanwhile moves neither side of a comparison


def changed(path: str, old: str, new: str) -> inputs.Inputs:
    """Inputs of this checkout (as ``BASE`` read it) in which ``path`` reads as a modified copy (``old`` replaced by
    ``new``)."""
    text = (ROOT / path).read_text()
    assert old in text, f"{path} no longer holds {old!r}"
    found = inputs.Inputs()
    found._blobs = dict(BASE._blobs)
    found._blobs[path] = inputs.blob_id(text.replace(old, new, 1).encode())
    return found


def fresh_records(found: inputs.Inputs) -> dict[str, evidence.Record]:
    """One record per cell (both paths), written now: what each cell's start would keep."""
    out = {}
    for cell in DATA.cells(include_serve=True):
        out[cell.name] = evidence.Record(
            name=cell.name, kind="cell", status="pass", commit=None, dirty=None, suite=None, pytest_args=[],
            device={"kind": "cpu"}, versions={}, date="2026-12-07T00:00:00+00:00", tests=[], path=cell.path,
            details={"inputs": found.snapshot(cell), "judge": found.judge_snapshot()})
    return out


@pytest.fixture(scope="module")
def fresh():
    return fresh_records(BASE)


def states(records, found: inputs.Inputs) -> dict[str, str]:
    judge = inputs.Freshness(DATA, inputs=found)
    return {name: judge(record)[0] for name, record in records.items()}


def test_a_tolerance_change_leaves_every_cell_fresh_and_a_measurement_change_does_not(fresh):
    assert set(states(fresh, BASE).values()) == {evidence.CURRENT}
    bound = changed(TOLERANCE, "RTOL = 1e-3", "RTOL = 2e-3")
    assert set(states(fresh, bound).values()) == {evidence.CURRENT}
    assert bound.judge_changes(next(iter(fresh.values()))) == [TOLERANCE]  # seen, as the judge's, not an input
    # what computes the figures is measurement: its change stales every cell (both paths run compat confirm's code)
    measured = changed("compat/confirm/compare.py", "OUTLIER_ROWS = 8", "OUTLIER_ROWS = 9")
    judged = inputs.Freshness(DATA, inputs=measured)
    for record in fresh.values():
        state, why = judged(record)
        assert state == evidence.STALE and "compat/confirm/compare.py" in why, (record.name, why)


def test_the_committed_records_stale_set_and_the_refresh_list_do_not_move_with_the_tolerance():
    records = {**coverage.load_records(), **gpu_record.load()}
    bound = changed(TOLERANCE, "RTOL = 1e-3", "RTOL = 2e-3")
    assert states(records, bound) == states(records, BASE)
    cells = coverage.load_records()
    now = [d.cell.name for d in refresh.due(DATA, cells, inputs.Freshness(DATA, inputs=BASE))]
    then = [d.cell.name for d in refresh.due(DATA, cells, inputs.Freshness(DATA, inputs=bound))]
    assert then == now
    for item in refresh.due(DATA, cells, inputs.Freshness(DATA, inputs=bound)):
        assert TOLERANCE not in item.why, item.why


def kept(per_layer: dict, rule: str = "within") -> evidence.Record:
    test = {"test": HIDDEN, "outcome": "passed", "seconds": 1.0,
            "figures": [figures.layer_figures(rule, per_layer, device="cpu")]}
    return evidence.Record(name="vllm0.32.0-spec0.4.0.1", kind="cell", status="pass", commit=None, dirty=None,
                           suite="0123456789abcdef", pytest_args=[], device={"kind": "cpu"}, versions={},
                           date="2026-12-07T00:00:00+00:00", tests=[test], details={"contract_seconds": 1.0})


def bound_at(monkeypatch, rtol: float) -> None:
    monkeypatch.setattr(tolerance, "FLOAT32_CPU", tolerance.Tolerance(rtol, "float32", "a test's bound"))


def test_a_kept_figure_crossing_a_new_bound_moves_the_verdict_and_the_page_shows_both(monkeypatch):
    record = kept({0: 1.2e-5, 1: 6e-4})  # a right float32 layer, and one 0.6 of today's CPU bound
    assert ci_judge.rejudge(record).status == "pass" and not ci_judge.rejudge(record).differs
    bound_at(monkeypatch, 5e-4)  # under the kept 6e-4: layer 1 crosses it
    today = ci_judge.rejudge(record)
    assert (today.status, today.as_run, today.rejudged) == ("fail", "pass", 1)
    assert "layers ['1']" in today.moved[0], today.moved
    page = coverage.render(DATA, {record.name: record}, {}, suite="0123456789abcdef", gpu={})
    row = next(line for line in page.splitlines() if line.startswith("| 0.32.0 |"))
    assert "**FAIL**" in row and "as run: pass" in row, row
    bound_at(monkeypatch, 7e-4)  # over it: the verdict stands
    assert ci_judge.rejudge(record).status == "pass"
    assert record.tests[0]["outcome"] == "passed"  # the record itself is left as it ran


def test_the_bf16_rejection_is_judged_again_too(monkeypatch):
    record = kept({0: 4e-2, 1: 7e-2}, rule="beyond")  # a bf16 downcast's per-layer error on CPU
    assert ci_judge.rejudge(record).status == "pass"
    bound_at(monkeypatch, 5e-2)  # a bound that lets a bf16 layer through: the rejection no longer holds
    assert ci_judge.rejudge(record).status == "fail"


def test_a_record_without_figures_keeps_its_verdict_and_says_it_cannot_be_judged_again(monkeypatch):
    record = kept({0: 6e-4})
    record.tests[0].pop("figures")
    record.details["judge"] = {TOLERANCE: "0" * 40}  # judged by another tolerance.py than today's
    bound_at(monkeypatch, 5e-4)
    today = ci_judge.rejudge(record)
    assert (today.status, today.rejudgeable) == ("pass", False)
    judge = inputs.Freshness(DATA, "0123456789abcdef", per_cell=False)
    note = coverage.verdict_note(record, today, judge)
    assert "not re-judgeable" in note and TOLERANCE in note, note
    record.details["judge"] = inputs.Inputs().judge_snapshot()  # judged by today's: nothing to say
    assert coverage.verdict_note(record, today, judge) == ""


def test_figures_judge_problems_no_bound_decides_and_refuse_an_unknown_format():
    ok, why = figures.judge(figures.layer_figures("within", {0: 1e-5}, problems=["result 2: another prompt's ids"]))
    assert not ok and "another prompt" in why
    assert not figures.judge(figures.layer_figures("within", {}))[0]  # nothing measured is no pass
    with pytest.raises(ValueError):
        figures.judge({"format": 99, "rule": "within"})
    assert ci_judge.judge_test({"test": HIDDEN, "outcome": "passed", "figures": [{"format": 99}]}) is None


def test_the_cell_runner_keeps_what_each_judging_test_measured(tmp_path, monkeypatch):
    kept_file = tmp_path / "figures.jsonl"
    monkeypatch.setenv(figures.ENV, str(kept_file))
    one = figures.keep(HIDDEN, figures.layer_figures("within", {0: 1e-5}))
    tests = [{"test": HIDDEN, "outcome": "passed", "seconds": 1.0},
             {"test": "tests/contract/test_oracle.py::test_x", "outcome": "passed", "seconds": 1.0}]
    got = evidence.with_figures(tests, figures.read(kept_file))
    assert got[0]["figures"] == [one] and "figures" not in got[1]
    from ci import cell

    record = cell.base_record(DATA.cells()[-3])
    assert set(record.details["judge"]) == set(inputs.JUDGE_FILES) & {
        p for p in inputs.JUDGE_FILES if (ROOT / p).is_file()}
    assert not set(record.details["inputs"]) & set(inputs.JUDGE_FILES)


def test_gpu_sets_are_judged_again_from_their_raw_runs(monkeypatch):
    records = gpu_record.load()
    f = records["h200-set-f"]  # float32 on an H200: worst 6.7e-3 per layer (TF32 attention)
    assert ci_judge.rejudge(f).status == "pass"
    monkeypatch.setattr(tolerance, "FLOAT32_CUDA", tolerance.Tolerance(5e-3, "tf32-attention", "a test's bound"))
    today = ci_judge.rejudge(f)
    assert today.status == "fail" and any("ok_fp32" in m for m in today.moved), today.moved
    monkeypatch.setattr(tolerance, "FLOAT32_CUDA", tolerance.Tolerance(1e-2, "tf32-attention", "a test's bound"))
    assert ci_judge.rejudge(f).status == "pass"


def test_every_record_cpu_and_gpu_is_judged_again_in_seconds():
    records = [*coverage.load_records().values(), *gpu_record.load().values()]
    started = time.monotonic()
    judged = [ci_judge.rejudge(r) for r in records]
    seconds = time.monotonic() - started
    assert len(judged) == len(records) > 100
    assert seconds < 10, f"{len(records)} records took {seconds:.1f} s"


def test_a_gpu_session_keeps_its_figures_and_is_judged_again_from_them(tmp_path, monkeypatch):
    from ci.gpu.__main__ import main

    monkeypatch.setattr(gpu_record, "OUT", tmp_path / "out")
    junit = tmp_path / "junit.xml"
    junit.write_text("<testsuite timestamp='2026-12-07T09:00:00'><testcase classname='tests.contract.test_hidden_states' "
                     "name='test_hidden_states_equal_hf_at_every_layer' time='1'/></testsuite>")
    kept_file = tmp_path / "figures.jsonl"
    monkeypatch.setenv(figures.ENV, str(kept_file))
    figures.keep(HIDDEN, figures.layer_figures("within", {0: 6.7e-3}, device="cuda"))  # TF32 attention's worst
    stamp = tmp_path / "stamp.json"
    stamp.write_text(json.dumps({"commit": "c" * 40, "dirty": False, "suite": "0" * 16}))
    assert main(["record", "--junit", str(junit), "--name", "h200-run9-core", "--stamp", str(stamp),
                 "--figures", str(kept_file)]) == 0
    (record,) = evidence.load(tmp_path / "out").values()
    assert record.tests[0]["figures"] and ci_judge.rejudge(record).status == "pass"
    monkeypatch.setattr(tolerance, "FLOAT32_CUDA", tolerance.Tolerance(5e-3, "tf32-attention", "a test's bound"))
    assert ci_judge.rejudge(record).status == "fail"
