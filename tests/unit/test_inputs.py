"""Staleness per cell: a record is stale only when something that decides its own outcome changed.

Expectations from release facts, not from ci/inputs.py: p17 (async scheduling off) exists because vLLM 0.14.0
made async scheduling default on (its declaration's upstream), so it can decide vLLM 0.20's cells and not 0.11's;
K1 is a patch of the serve path (patches/serve), which no old-path cell runs.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path

import pytest

from ci import evidence, inputs, table

ROOT = Path(__file__).resolve().parents[2]
DATA = table.load()
CELLS = {c.name: c for c in DATA.cells(include_serve=True)}
OLD_020, OLD_011, SERVE_032 = "vllm0.20.0-spec0.4.0.1", "vllm0.11.0-spec0.3.0", "vllm0.32.0-spec0.9.0"


@pytest.fixture
def tree(tmp_path):
    """A copy of what decides cells (the kit, patches, tests, fixtures, ci, pyproject) to change files in."""
    for top in ("compat", "patches", "tests", "fixtures", "ci"):
        shutil.copytree(ROOT / top, tmp_path / top, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    return tmp_path


def _record(name: str, snapshot: dict, ran: list[str] | None = None) -> evidence.Record:
    cell = CELLS[name]
    tests = [{"test": f"{path}::test_it", "outcome": "passed", "seconds": 1.0} for path in (ran or [])]
    return evidence.Record(name=name, kind="cell", status="pass", commit=None, dirty=None, suite=None,
                           pytest_args=[], device={"kind": "cpu"}, versions={}, date="2026-12-02T00:00:00+00:00",
                           tests=tests, path=cell.path, details={"inputs": copy.deepcopy(snapshot)})


def _ran(tree: Path, name: str) -> list[str]:
    return inputs.Inputs(tree).scope_tests(CELLS[name])


def _records(tree: Path) -> dict[str, evidence.Record]:
    snap = inputs.Inputs(tree)
    return {name: _record(name, snap.snapshot(CELLS[name]), _ran(tree, name)) for name in (OLD_020, OLD_011, SERVE_032)}


def _changes(tree: Path, records: dict) -> dict[str, list[str]]:
    now = inputs.Inputs(tree)
    return {name: now.changes(CELLS[name], record) for name, record in records.items()}


def _touch(path: Path) -> None:
    """A change to what the file runs (a comment alone would not be one: see the comment-only test below)."""
    path.write_text(path.read_text() + "\nCHANGED_BY_THE_TEST = True\n")


def test_records_of_an_unchanged_checkout_are_fresh(tree):
    assert _changes(tree, _records(tree)) == {OLD_020: [], OLD_011: [], SERVE_032: []}


def test_a_change_to_a_serve_only_patch_leaves_old_path_records_fresh(tree):
    records = _records(tree)
    _touch(tree / "patches" / "serve" / "k1_cpu_connector.py")
    changes = _changes(tree, records)
    assert changes[OLD_020] == [] and changes[OLD_011] == []
    assert changes[SERVE_032] == ["patches/serve/k1_cpu_connector.py (patch) changed"]
    records = _records(tree)
    _touch(tree / "compat" / "serve" / "runner.py")  # the serve path's own driver
    changes = _changes(tree, records)
    assert changes[OLD_020] == [] and changes[SERVE_032] == ["compat/serve/runner.py (harness) changed"]


def test_a_change_to_an_old_path_patch_in_range_of_0_20_stales_0_20_but_not_0_11(tree):
    records = _records(tree)
    _touch(tree / "patches" / "p17_async_scheduling_off.py")
    changes = _changes(tree, records)
    assert changes[OLD_020] == ["patches/p17_async_scheduling_off.py (patch) changed"]
    assert changes[OLD_011] == [] and changes[SERVE_032] == []


def test_the_harness_stales_every_cell_and_a_probe_only_its_pipelines_cells(tree):
    records = _records(tree)
    _touch(tree / "compat" / "apply.py")
    assert all(c == ["compat/apply.py (harness) changed"] for c in _changes(tree, records).values())
    records = _records(tree)
    _touch(tree / "compat" / "serve" / "probes" / "cpu_copy.py")  # K1's probe: the serve path's only
    changes = _changes(tree, records)
    assert changes[OLD_020] == [] and changes[SERVE_032] == ["compat/serve/probes/cpu_copy.py (probe) changed"]
    records = _records(tree)
    _touch(tree / "compat" / "probes" / "runner_v2.py")  # an old-path probe: test_runtime_probes checks its claims
    changes = _changes(tree, records)
    assert changes[OLD_020] == changes[OLD_011] == ["compat/probes/runner_v2.py (probe) changed"]


def test_a_test_file_the_cell_ran_stales_it_and_a_new_one_in_its_scope_too(tree):
    records = _records(tree)
    ran = _ran(tree, OLD_020)[0]
    _touch(tree / ran)
    assert _changes(tree, records)[OLD_020] == [f"{ran} (test) changed"]
    records = _records(tree)
    (tree / "tests" / "contract" / "test_brand_new.py").write_text("def test_new():\n    pass\n")
    changes = _changes(tree, records)
    assert changes[OLD_020] == ["tests/contract/test_brand_new.py (test) is new: it never ran on this cell"]
    assert changes[SERVE_032] == []  # not in the serve cells' scope


def test_the_old_paths_harness_stales_old_cells_and_the_conftest_chain_every_cell(tree):
    """A serve test loads tests/contract/conftest.py (markers, fixtures) but never the old path's harness beside
    it (tests/contract/harness.py, run by the old cells' cell_report fixture in its own process)."""
    records = _records(tree)
    _touch(tree / "tests" / "contract" / "harness.py")
    changes = _changes(tree, records)
    assert changes[OLD_020] == changes[OLD_011] == ["tests/contract/harness.py (helper) changed"]
    assert changes[SERVE_032] == []
    records = _records(tree)
    _touch(tree / "tests" / "contract" / "conftest.py")
    assert all(c == ["tests/contract/conftest.py (helper) changed"] for c in _changes(tree, records).values())
    # a module the conftest comes to import decides the serve cells too
    (tree / "tests" / "contract" / "conftest.py").write_text(
        (tree / "tests" / "contract" / "conftest.py").read_text() + "\nfrom tests.contract import processes\n")
    records = _records(tree)
    _touch(tree / "tests" / "contract" / "processes.py")
    assert _changes(tree, records)[SERVE_032] == ["tests/contract/processes.py (helper) changed"]


def test_a_record_without_inputs_is_judged_by_its_clean_commits_tree():
    """b4d4a2d's compat/host.py scanned bytes; this branch reads ELF (git log): every cell's harness changed."""
    judge = inputs.Inputs(ROOT)
    assert judge.tree("b4d4a2d") is not None, "the checkout must hold b4d4a2d (a clone with history)"
    record = _record(OLD_011, {}, [])
    record.details = {}
    record.commit, record.dirty = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "b4d4a2d"],
                                                 capture_output=True, text=True, check=True).stdout.strip(), False
    assert "compat/host.py (harness) changed" in judge.changes(CELLS[OLD_011], record)
    record.dirty, record.suite = True, "f" * 16  # uncommitted changes: what it ran is unknown, the suite rule decides
    assert judge.changes(CELLS[OLD_011], record) is None
    state, why = inputs.Freshness(DATA, suite="0" * 16)(record)
    assert state == evidence.STALE and "suite" in why


def test_a_cell_record_carries_its_inputs():
    from ci import cell

    record = cell.base_record(CELLS[OLD_020])
    assert record.details["inputs"]["patches/p17_async_scheduling_off.py"] == inputs.blob_id(
        (ROOT / "patches" / "p17_async_scheduling_off.py").read_bytes())
    assert "patches/serve/k1_cpu_connector.py" not in record.details["inputs"]
    assert inputs.blob_id(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"  # git hash-object of it


def test_a_surface_decides_its_release_by_presence_not_by_its_probe_values(tree):
    """A new probe's values written into every shipped surface stale no cell: no cell reads them (plan, apply and
    confirm evaluate what they are given); a release's surface gone changes the release lines its cells are
    ordered by, and stales them."""
    import json

    records = _records(tree)
    surface = tree / "compat/surfaces/vllm-0.20.0.json"
    doc = json.loads(surface.read_text())
    doc["probes"]["serve.some_new_probe"] = "some-value"
    surface.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    assert _changes(tree, records) == {OLD_020: [], OLD_011: [], SERVE_032: []}
    surface.unlink()
    changed = _changes(tree, records)
    assert changed[OLD_020] and "compat/surfaces/vllm-0.20.0.json" in changed[OLD_020][0], changed
    assert changed[OLD_011] == [] and changed[SERVE_032] == []


def _gpu_record(commit: str = "c" * 40) -> evidence.Record:
    return evidence.Record(name="h100-set-x", kind="gpu", status="pass", commit=commit, dirty=False, suite="0" * 16,
                           pytest_args=None, device={"kind": "cuda"}, versions={}, date="2026-12-05T00:00:00+00:00",
                           tests=[], details={})


def _judge_gpu(tree: Path, record: evidence.Record, then: dict) -> tuple[str, str]:
    judge = inputs.Inputs(tree)
    judge._trees[record.commit] = then  # the commit the GPU run recorded, as git would list it
    return inputs.Freshness(DATA, suite="f" * 16, inputs=judge)(record)


def test_a_gpu_record_is_staled_by_suite_files_changed_since_its_commit_not_by_the_generated_evidence(tree):
    """The GPU run at commit C: regenerating compat/proof_evidence.py from its own record must not stale it (the
    suite hash changes), a change to what it ran must; a run with uncommitted changes keeps the suite rule."""
    record = _gpu_record()
    then = {p.relative_to(tree).as_posix(): inputs.blob_id(p.read_bytes()) for p in evidence.suite_files(tree)}
    assert _judge_gpu(tree, record, then) == (evidence.CURRENT, "")
    _touch(tree / "compat" / "proof_evidence.py")
    assert _judge_gpu(tree, record, then) == (evidence.CURRENT, "")
    _touch(tree / "compat" / "shared" / "tolerance.py")  # the judge: it re-judges the run's figures (ci/judge.py)
    assert _judge_gpu(tree, record, then) == (evidence.CURRENT, "")
    _touch(tree / "compat" / "confirm" / "compare.py")  # what computes the figures
    assert _judge_gpu(tree, record, then) == (evidence.STALE, "compat/confirm/compare.py changed since cccccccccc")
    (tree / "patches" / "serve" / "k99_new.py").write_text("ID = 'x'\n")
    state, why = _judge_gpu(tree, record, then)
    assert state == evidence.STALE and "patches/serve/k99_new.py is new since cccccccccc" in why
    record.dirty = None  # what ran is unknown: the whole-suite rule
    state, why = _judge_gpu(tree, record, then)
    assert state == evidence.STALE and "not this checkout's" in why


def _committed(tree: Path) -> None:
    """Make ``tree`` a git repository holding its files, so the bytes a record ran with can be read back."""
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "PATH": "/usr/bin:/bin:/usr/local/bin", "HOME": str(tree)}
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "ran"]):
        subprocess.run(["git", "-C", str(tree), *argv], check=True, capture_output=True, env=env)


def test_comments_docstrings_and_layout_stale_no_cell_and_a_code_change_does(tree):
    """A comment, a docstring or a reflowed line changes no instruction a cell runs; the bytes it ran with are read
    back from git and the two syntax trees compared.  The same edit to the judge makes no record 'not
    re-judgeable'.  A string the code prints is code: it stales."""
    _committed(tree)
    records = _records(tree)
    records[SERVE_032].details["judge"] = inputs.Inputs(tree).judge_snapshot()  # as a cell writes it when it runs
    apply = tree / "compat" / "apply.py"
    text = apply.read_text()
    edited = text.replace('"""``compat apply``: decide', '"""``compat apply`` (reworded): decide', 1)
    edited = edited.replace("\ndef run(", "\n# a comment added above run\n\n\ndef run(", 1)
    assert edited != text
    apply.write_text(edited)
    tolerance = tree / "compat" / "shared" / "tolerance.py"
    tolerance.write_text(tolerance.read_text() + "\n# a comment on the bounds\n")
    assert _changes(tree, records) == {OLD_020: [], OLD_011: [], SERVE_032: []}
    now = inputs.Inputs(tree)
    assert now.judge_changes(records[SERVE_032]) == []
    apply.write_text(edited.replace("nothing was changed", "nothing changed", 1))
    tolerance.write_text(tolerance.read_text() + "EXTRA_BOUND = 1.0\n")
    changed = _changes(tree, records)
    assert all(c == ["compat/apply.py (harness) changed"] for c in changed.values()), changed
    assert inputs.Inputs(tree).judge_changes(records[SERVE_032]) == ["compat/shared/tolerance.py"]


def test_a_comment_change_still_stales_where_git_cannot_give_back_what_ran(tree):
    """Without the bytes it ran with (a run from uncommitted files, a repository without that blob), nothing
    tells a comment from code: the bytes decide."""
    records = _records(tree)  # tree is no git repository
    apply = tree / "compat" / "apply.py"
    apply.write_text(apply.read_text() + "\n# only a comment\n")
    assert _changes(tree, records)[OLD_020] == ["compat/apply.py (harness) changed"]
