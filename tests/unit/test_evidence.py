"""ci/evidence.py: the one record shape, the suite hash that ties a record to the code, the one JUnit reader."""

from __future__ import annotations

import shutil

import pytest

from ci import evidence


def _tree(tmp_path):
    for top in evidence.SUITE_PATHS:
        (tmp_path / top).mkdir(parents=True)
        (tmp_path / top / "a.py").write_text(f"# {top}\n")
    return tmp_path


@pytest.mark.parametrize("top", evidence.SUITE_PATHS)
def test_one_changed_byte_in_any_suite_folder_changes_the_hash(tmp_path, top):
    root = _tree(tmp_path)
    before = evidence.suite_hash(root)
    (root / top / "a.py").write_text(f"# {top}!\n")
    assert evidence.suite_hash(root) != before


def test_a_renamed_file_changes_the_hash_and_caches_do_not(tmp_path):
    root = _tree(tmp_path)
    before = evidence.suite_hash(root)
    (root / "compat" / "__pycache__").mkdir()
    (root / "compat" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    (root / "README.md").write_text("not part of the suite\n")
    assert evidence.suite_hash(root) == before
    shutil.move(root / "compat" / "a.py", root / "compat" / "b.py")
    assert evidence.suite_hash(root) != before


def test_this_checkouts_stamp_names_its_commit_and_suite():
    stamp = evidence.stamp()
    assert stamp["suite"] == evidence.suite_hash() and len(stamp["suite"]) == 16
    assert stamp["commit"] is None or len(stamp["commit"]) == 40


def test_the_junit_reader_gives_node_ids_outcomes_and_first_message_lines(tmp_path):
    path = tmp_path / "junit.xml"
    path.write_text(
        "<testsuites><testsuite>"
        "<testcase classname='tests.contract.test_a' name='test_ok' time='1.234'/>"
        "<testcase classname='tests.contract.test_a' name='test_bad[x]' time='2'>"
        "<failure message='AssertionError: layer 2&#10;more'>trace</failure></testcase>"
        "<testcase classname='tests.contract.test_a.TestGroup' name='test_err' time='0'><error>boom&#10;x</error>"
        "</testcase>"
        "<testcase classname='tests.contract.test_b' name='test_skip' time='0'><skipped message='CPU only'/></testcase>"
        "</testsuite></testsuites>")
    assert evidence.junit_tests(path) == [
        {"test": "tests/contract/test_a.py::test_ok", "outcome": "passed", "seconds": 1.23},
        {"test": "tests/contract/test_a.py::test_bad[x]", "outcome": "failed", "seconds": 2.0,
         "message": "AssertionError: layer 2"},
        {"test": "tests/contract/test_a.py::TestGroup::test_err", "outcome": "error", "seconds": 0.0,
         "message": "boom"},
        {"test": "tests/contract/test_b.py::test_skip", "outcome": "skipped", "seconds": 0.0, "message": "CPU only"},
    ]


@pytest.mark.parametrize("tests, code, status", [
    ([{"outcome": "passed"}, {"outcome": "skipped"}], 0, "pass"),
    ([], 0, "fail"),  # nothing ran: no pass
    ([{"outcome": "skipped"}], 0, "fail"),  # only skips: no pass
    ([{"outcome": "passed"}], 1, "fail"),  # pytest disagreed (a collection error has no testcase)
    ([{"outcome": "passed"}, {"outcome": "error"}], 0, "fail"),
])
def test_a_pass_needs_a_passed_test_no_failure_and_pytest_agreeing(tests, code, status):
    assert evidence.status_of(tests, code) == status


def _record(**changes):
    fields = dict(name="vllm0.32.0-spec0.3.0", kind="cell", status="pass", commit="c" * 40, dirty=False,
                  suite="0123456789abcdef", pytest_args=["-m", "contract"], device={"kind": "cpu"},
                  versions={"vllm": "0.32.0"}, date="2026-12-01T09:00:00+00:00",
                  tests=[{"test": "t", "outcome": "passed", "seconds": 1.0}])
    return evidence.Record(**{**fields, **changes})


def test_records_round_trip_and_say_how_fresh_they_are(tmp_path):
    record = _record()
    evidence.write(record, tmp_path)
    (loaded,) = evidence.load(tmp_path).values()
    assert loaded == record
    assert loaded.freshness("0123456789abcdef") == evidence.CURRENT
    assert loaded.freshness("fedcba9876543210") == evidence.STALE
    assert _record(suite=None).freshness("0123456789abcdef") == evidence.LEGACY


@pytest.mark.parametrize("doc, match", [
    ({"schema": 1, "cell": "x", "status": "pass"}, "schema 1"),
    ({**_record().as_json(), "surprise": 1}, "unknown fields"),
    ({k: v for k, v in _record().as_json().items() if k != "suite"}, "missing"),
    ({**_record().as_json(), "status": "ok"}, "status 'ok'"),
    ({**_record().as_json(), "path": "modern"}, "path 'modern'"),
])
def test_a_record_of_another_shape_is_refused(doc, match):
    with pytest.raises(evidence.RecordError, match=match):
        evidence.Record.from_json(doc)


def test_a_record_filed_under_another_name_is_refused(tmp_path):
    evidence.write(_record(), tmp_path)
    (tmp_path / "vllm0.32.0-spec0.3.0.json").rename(tmp_path / "vllm0.11.0-spec0.3.0.json")
    with pytest.raises(evidence.RecordError, match="holds the record of"):
        evidence.load(tmp_path)


def test_a_record_says_which_path_it_ran_and_one_written_before_paths_is_the_old_path(tmp_path):
    serve = _record(path="serve")
    evidence.write(serve, tmp_path)
    assert evidence.load(tmp_path)[serve.name].path == "serve"
    before = {k: v for k, v in _record().as_json().items() if k != "path"}  # the committed records' shape
    assert evidence.Record.from_json(before).path == "old"
