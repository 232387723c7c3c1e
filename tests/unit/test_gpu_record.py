"""The GPU lane's records: each scenario judged against its written expectation, one run one record."""

import copy

import pytest

from ci import evidence
from ci.gpu import record as gpu_record

SETS = ("a", "b", "c", "e", "f", "g", "h", "pp2_async", "kh26a", "kh26b")
#: the record each set was written as (the sets before 2026-12-05 ran on H200s, the vLLM 0.26.0 sets on an H100)
RECORD = {**{name: f"h200-set-{name}" for name in SETS}, "kh26a": "h100-set-kh26a", "kh26b": "h100-set-kh26b"}


def _raw():
    return gpu_record._raw()


@pytest.mark.parametrize("name", SETS)
def test_each_committed_set_record_is_what_its_raw_runs_judge_to(name):
    committed = gpu_record.load()[RECORD[name]]
    assert committed.tests == gpu_record.set_record(name).tests, f"run python -m ci.gpu record --set {name}"


def test_every_expectation_has_its_run_and_passes():
    raw = _raw()
    assert set(gpu_record.EXPECT) <= set(raw)
    for name in SETS:
        failed = [t for t in gpu_record.set_record(name).tests if t["outcome"] != "passed"]
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


def test_one_junit_file_is_one_record_and_nothing_is_carried_between_runs(tmp_path):
    """The old record kept each test's latest outcome across runs of different harnesses; a run now stands alone."""
    def junit(path, outcome):
        body = "<failure message='boom'/>" if outcome == "failed" else ""
        path.write_text(f"<testsuites><testsuite timestamp='2026-12-01T09:00:00'><testcase "
                        f"classname='tests.contract.test_x' name='test_y' time='1'>{body}</testcase></testsuite>"
                        "</testsuites>")
        return path

    old = gpu_record.junit_record("run-a", junit(tmp_path / "a.xml", "failed"))
    new = gpu_record.junit_record("run-b", junit(tmp_path / "b.xml", "passed"), stamp=evidence.stamp(),
                                  pytest_args=["-m", "contract"])
    assert (old.status, [t["outcome"] for t in old.tests]) == ("fail", ["failed"])
    assert (new.status, [t["outcome"] for t in new.tests]) == ("pass", ["passed"])
    assert old.freshness(evidence.suite_hash()) == evidence.LEGACY
    assert new.freshness(evidence.suite_hash()) == evidence.CURRENT
    assert new.date == "2026-12-01T09:00:00"


def test_the_record_command_writes_one_run_with_the_devices_stamp(tmp_path, monkeypatch):
    from ci.gpu.__main__ import main

    monkeypatch.setattr(gpu_record, "OUT", tmp_path / "out")
    junit = tmp_path / "junit_core.xml"
    junit.write_text("<testsuite timestamp='2026-12-01T09:00:00'><testcase classname='tests.contract.test_x' "
                     "name='test_y' time='1'/></testsuite>")
    stamp = tmp_path / "stamp.json"
    stamp.write_text('{"commit": "%s", "dirty": false, "suite": "0123456789abcdef"}' % ("c" * 40))
    machine = tmp_path / "machine.txt"
    machine.write_text("name, driver_version, memory.total [MiB]\nNVIDIA H200, 580.159.04, 143771 MiB\n")
    assert main(["record", "--junit", str(junit), "--name", "h200-run9-core", "--stamp", str(stamp),
                 "--pytest-args", "-m 'contract and not proof'", "--machine", str(machine)]) == 0
    (record,) = evidence.load(tmp_path / "out").values()
    assert (record.name, record.suite, record.status) == ("h200-run9-core", "0123456789abcdef", "pass")
    assert record.pytest_args == ["-m", "contract and not proof"]
    assert record.device == {"kind": "cuda", "count": 1, "names": ["NVIDIA H200"]}
    assert main(["record", "--junit", str(junit)]) == 2  # a run needs its name
    stamp.write_text('{"commit": null, "dirty": null, "suite": "0123456789abcdef"}')  # what ran is not known
    assert main(["record", "--junit", str(junit), "--name", "h200-run10-core", "--stamp", str(stamp)]) == 0
    assert set(evidence.load(tmp_path / "out")) == {"h200-run9-core"}  # it vouches for nothing: archived
    assert set(evidence.load(tmp_path / "out" / "archive")) == {"h200-run10-core"}


def test_a_serve_report_is_a_serve_path_record(tmp_path):
    """The proofs and the coverage page sort records by pipeline: a `compat confirm --path serve` run is not old-path
    evidence (speculators 0.9.0 has no old generator)."""
    report = tmp_path / "confirm.json"
    report.write_text('{"verdict": "OK", "checks": {"files": {"ok": true}}, "timings": {"server_start_s": 1}}')
    record = gpu_record.serve_record("x", report)
    assert record.path == "serve" and record.status == "pass"
    assert gpu_record.load()["h100-serve-moe-0.26.0"].path == "serve"
