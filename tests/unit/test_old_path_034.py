"""The old path (speculators 0.3.0 / 0.4.x ``VllmHiddenStatesGenerator``) on vLLM 0.33 and 0.34: a definite answer.

Upstream facts, read here from the wheels (not through the kit):

* The generator imports nothing of V1's model runner (``vllm.v1.worker.gpu_model_runner``, ``vllm.v1.spec_decode``,
  ``vllm.v1.sample``), so vLLM 0.34's removal of V1 alone does not stop it: every module it imports ships in 0.34.
  On 0.33 and 0.34 it runs on Model Runner V2 (CUDA), which keeps no ``input_batch`` (the kit's
  ``vllm.runner.v2_has_no_input_batch``), and 0.33 moved the KV planning functions (``vllm.kv_cache.planning_module``).
* vLLM 0.34 turns the extensible KV cache on by default on CUDA: ``Worker.initialize_from_config`` then only
  reserves the cache, whose blocks are backed in warm-up and ``extend_kv_cache``, which the engine core calls
  (``vllm/v1/engine/core.py``) and the generator, which drives the executor itself, never does.  No kit patch
  covers it: the plan says NO, with that reason.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from fixtures.wheels import wheel

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"
WORKER = "speculators/data_generation/custom_worker.py"


def plan(vllm: str, speculators: str) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, "-m", "compat.plan", "--wheel", str(wheel(vllm)), "--speculators",
                           str(wheel(speculators)), "--json"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    return proc.returncode, json.loads(proc.stdout)


def _imports(requirement: str) -> set[str]:
    archive = zipfile.ZipFile(wheel(requirement))
    out = set()
    for relpath in (GENERATOR, WORKER):
        for node in ast.walk(ast.parse(archive.read(relpath))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("vllm"):
                out.add(node.module)
    return out


@pytest.mark.parametrize("speculators", ["speculators==0.3.0", "speculators==0.4.0.1"])
def test_the_generators_vllm_imports_all_ship_in_0_34(speculators):
    names = set(zipfile.ZipFile(wheel("vllm==0.34.0")).namelist())
    for module in _imports(speculators):
        path = module.replace(".", "/")
        assert f"{path}.py" in names or f"{path}/__init__.py" in names, module
        assert not module.startswith(("vllm.v1.worker.gpu_model_runner", "vllm.v1.spec_decode", "vllm.v1.sample"))


def test_0_34_extensible_kv_cache_backs_blocks_only_where_the_engine_core_asks():
    archive = zipfile.ZipFile(wheel("vllm==0.34.0"))
    worker = archive.read("vllm/v1/worker/gpu_worker.py").decode()
    init = worker[worker.index("def initialize_from_config"):worker.index("def get_simple_cpu_offload_num_cpu_blocks")]
    assert "if self.cache_config.enable_extensible_kv_cache:" in init and "extensible=True" in init
    assert "self.model_executor.extend_kv_cache(" in archive.read("vllm/v1/engine/core.py").decode()
    cache = archive.read("vllm/config/cache.py").decode()
    assert "enable_extensible_kv_cache: bool = Field(default=None)" in cache  # settled on where supported
    for speculators in ("speculators==0.3.0", "speculators==0.4.0.1"):
        generator = zipfile.ZipFile(wheel(speculators)).read(GENERATOR).decode()
        assert "initialize_from_config" in generator and "extend_kv_cache" not in generator
        assert "enable_extensible_kv_cache" not in generator


@pytest.mark.parametrize("speculators", ["speculators==0.3.0", "speculators==0.4.0.1"])
def test_the_plan_says_no_on_0_34_with_the_reason(speculators):
    code, doc = plan("vllm==0.34.0", speculators)
    assert code == 1 and doc["answer"].startswith("NO:"), doc["answer"]
    assert "extensible KV cache" in doc["answer"] and "extend_kv_cache" in doc["answer"]
    assert "vLLM <= 0.33" in doc["answer"]


def test_the_plan_on_0_33_names_its_patches_and_that_nothing_ran_there():
    code, doc = plan("vllm==0.33.0", "speculators==0.4.0.1")
    assert code == 0 and doc["answer"].startswith("YES"), doc["answer"]
    needed = {p["id"] for p in doc["patches"] if p["verdict"] == "needed"}
    assert {"vllm.kv_cache.planning_module", "vllm.runner.v2_has_no_input_batch"} <= needed
    assert doc["runner"]["runners"] == ["v2"] and "Model Runner V2" in doc["unproven_path"]
    assert set(doc["unproven"]) == needed  # no record ran the generator on 0.33 (no CPU build; the GPU lane: 0.26)
