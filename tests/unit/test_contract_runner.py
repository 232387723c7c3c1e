"""The contract harness's runner without vLLM: every run gets files of its own, a forked child's result comes back
through its own file (or says why it did not), and the cell's declared runs start the way their claims need."""

from __future__ import annotations

import os
from pathlib import Path

from tests.contract import harness, observers, processes
from tests.contract.settings import Settings


def _runner(tmp_path) -> harness.Runner:
    settings = Settings(model="m", out_dir=tmp_path, device_type="cpu", rtol=1e-3, tolerance="rule")
    return harness.Runner(settings, reference=None, layers=[0], calls={}, root=tmp_path / "runs")


def test_every_run_gets_files_of_its_own_headed_by_its_name(tmp_path):
    runner = _runner(tmp_path)
    keys = ["patched", "pristine", "a.b+c.d", "patched"]  # a key may come twice (a rerun): still its own files
    files = [runner.files(key) for key in keys]
    paths = [path for f in files for path in (f.output, f.log, f.result, f.captures)]
    assert len(set(paths)) == len(paths)
    for key, f in zip(keys, files):
        for path in (f.log, f.output):
            assert path.read_text().splitlines() == [f"== harness run {key} (pid {os.getpid()})"]


def test_a_forked_child_returns_its_result_through_its_own_file(tmp_path):
    child = processes.fork(lambda: {"ok": True, "pid": os.getpid()}, tmp_path / "a.out", tmp_path / "a.json")
    doc = processes.result_of(child, limit_s=60)
    assert doc["ok"] is True and doc["pid"] == child.pid
    assert Path(tmp_path / "a.json").exists()


def test_a_child_that_dies_says_so_with_its_own_output(tmp_path):
    def dies():
        os.write(1, b"the child's last words\n")
        os._exit(3)

    child = processes.fork(dies, tmp_path / "b.out", tmp_path / "b.json")
    doc = processes.result_of(child, limit_s=60)
    assert doc["ok"] is False and doc["error"]["type"] == "ChildDied" and "with 3" in doc["error"]["message"]
    assert "the child's last words" in doc["error"]["traceback"]


def test_a_child_that_raises_reports_the_exception(tmp_path):
    def raises():
        raise ValueError("nope")

    doc = processes.result_of(processes.fork(raises, tmp_path / "c.out", tmp_path / "c.json"), limit_s=60)
    assert doc["stage"] == "child" and doc["error"]["type"] == "ValueError"


PARTS = ["pristine", "reverted", "patched", "bf16", "proofs", "binding"]
BIND = observers.BINDING_PATCH


def test_the_cell_declares_spawned_runs_where_spawning_is_the_claim():
    runs = {r.key: r for r in harness.declare(PARTS, ["p1", BIND, "p2"], ["t1", "t2"], True, {"p2": b""})}
    assert runs[BIND].workers == "spawn" and runs[BIND].vllm_binding and runs[BIND].background
    assert runs["t1+t2"].workers == "spawn" and runs["t1+t2"].background and runs["t1+t2"].left_out == ("t1", "t2")
    assert runs["patched"].workers == "fork" and runs["patched"].serves == {"p2": b""}
    assert "p2" not in runs  # served by the patched engine
    assert runs["p1"].workers == "fork" and runs["p1"].tree == "p1" and runs["p1"].left_out == ("p1",)
    assert runs["pristine"].tree == "pristine" and runs["reverted"].tree == "reverted"


def test_proofs_alone_use_the_platforms_workers_one_after_another():
    runs = harness.declare(["proofs"], ["p1", "p2"], ["t1"], False, {}, proofs_workers=None)
    assert [r.key for r in runs] == ["p1", "p2", "t1"]
    assert all(r.workers is None and not r.background and r.process == "child" for r in runs)


def test_the_kit_writes_the_background_trees_first():
    trees = [t.key for t in harness.trees_for(PARTS, ["p1", BIND], ["t1", "t2"], True)]
    assert trees == [BIND, "t1+t2", "pristine", "reverted", "p1"]
