"""The GPU lane's coverage record: each scenario judged against its written expectation, and the file is current."""

import copy
import json

from ci.gpu import record as gpu_record


def _raw():
    return gpu_record._raw()


def test_committed_record_is_current():
    path = gpu_record.OUT / "vllm0.20.0-h200.json"
    assert json.loads(path.read_text())["tests"] == gpu_record.build()["tests"], "run python -m ci.gpu record"


def test_every_expectation_has_its_run_and_passes():
    raw = _raw()
    assert set(gpu_record.EXPECT) <= set(raw)
    failed = [t for t in gpu_record.build()["tests"] if t["outcome"] != "passed"]
    assert not failed, failed


def test_a_wrong_verdict_fails_the_judgement():
    raw = _raw()
    rec = copy.deepcopy(raw[("f", "ok_fp32")])
    rec["confirm_json"]["verdict"] = "WRONG"
    assert gpu_record.judge("verdict", "OK", rec, raw)[0] == "failed"


def test_a_missing_symptom_fails_the_judgement():
    raw = _raw()
    rec = copy.deepcopy(raw[("f", "ok_fp32")])  # a clean run carries no symptom text
    assert gpu_record.judge("symptom", "platform.workers_spawned_after_cuda_touch", rec, raw)[0] == "failed"


def test_one_differing_digit_fails_the_equality():
    raw = _raw()
    rec = copy.deepcopy(raw[("h", "no_async_030_fp32")])
    layer = next(iter(rec["confirm_json"]["calls"][2]["layers"].values()))
    layer["max_abs_diff"] = layer["max_abs_diff"] * (1 + 1e-12) + 1e-12
    assert gpu_record.judge("equal", ("h", "ok_030_fp32"), rec, raw)[0] == "failed"


def test_equality_needs_async_scheduling_observed_on():
    raw = _raw()
    rec = copy.deepcopy(raw[("h", "no_async_030_fp32")])
    rec["observed"]["async_scheduling"] = False
    assert gpu_record.judge("equal", ("h", "ok_030_fp32"), rec, raw)[0] == "failed"


def test_pp2_async_runs_are_judged_by_which_calls_are_wrong():
    raw = _raw()
    wrong, right = raw[("pp2_async", "default")], raw[("pp2_async", "off")]
    assert gpu_record.judge("calls_wrong", {1: False, 11: True}, wrong, raw)[0] == "passed"
    assert gpu_record.judge("calls_wrong", {1: False, 11: True}, right, raw)[0] == "failed"  # the right run is not it
    assert gpu_record.judge("calls_wrong", {1: False, 11: False}, wrong, raw)[0] == "failed"


def test_junit_files_keep_each_tests_latest_outcome(tmp_path):
    def junit(path, outcome):
        body = "<failure message='boom'/>" if outcome == "failed" else ""
        path.write_text(f"<testsuite><testcase classname='tests.contract.test_x' name='test_y' time='1'>{body}"
                        "</testcase></testsuite>")
        return path

    old, new = junit(tmp_path / "a.xml", "failed"), junit(tmp_path / "b.xml", "passed")
    assert [t["outcome"] for t in gpu_record.build(junit=[old, new])["contract"]] == ["passed"]
    assert [t["outcome"] for t in gpu_record.build(junit=[new, old])["contract"]] == ["failed"]
