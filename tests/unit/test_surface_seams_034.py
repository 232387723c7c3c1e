"""The seams of vLLM 0.33 -> 0.34 as data: ``compat surface diff 0.33.0 0.34.0`` on the shipped surfaces.

Each expected change is read here from the two wheels themselves (not through the kit's probes): V1's model
runner is gone, ``Request`` wraps the prompt's ids in a ``TokenBuffer``, ``SpeculativeConfig`` drops
``disable_padded_drafter_batch``, ``KVConnectorBase_V1`` gains three methods, the extensible KV cache arrives,
and the V2 runner's deferred ``wait_for_save`` (0.33) becomes the only behaviour.
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
BASE = "vllm/distributed/kv_transfer/kv_connector/v1/base.py"


def surface_cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "compat.surface", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def _tree(release: str, relpath: str) -> ast.Module:
    return ast.parse(zipfile.ZipFile(wheel(f"vllm=={release}")).read(relpath))


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)


def _methods(release: str) -> set[str]:
    return {n.name for n in _class(_tree(release, BASE), "KVConnectorBase_V1").body if isinstance(n, ast.FunctionDef)}


def _fields(release: str) -> set[str]:
    cls = _class(_tree(release, "vllm/config/speculative.py"), "SpeculativeConfig")
    return {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}


@pytest.fixture(scope="module")
def changes() -> dict:
    proc = surface_cli("diff", "0.33.0", "0.34.0", "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_v1_removal(changes):
    assert "vllm/v1/worker/gpu_model_runner.py" not in zipfile.ZipFile(wheel("vllm==0.34.0")).namelist()
    assert changes["runner.v2_default"] == {"old": "default", "new": "only"}
    assert changes["serve.runner"]["new"].startswith("v2") and changes["serve.runner"]["old"].startswith("by-platform")


def test_the_token_buffer(changes):
    text = zipfile.ZipFile(wheel("vllm==0.34.0")).read("vllm/v1/request.py").decode()
    assert "TokenBuffer(prompt_token_ids)" in text
    assert changes["request.prompt_token_ids"] == {"old": "list", "new": "TokenBuffer"}


def test_speculative_config_fields(changes):
    old, new = _fields("0.33.0"), _fields("0.34.0")
    assert "disable_padded_drafter_batch" in old - new
    change = changes["serve.config.speculative_fields"]
    assert set(change["old"]) - set(change["new"]) == old - new
    assert set(change["new"]) - set(change["old"]) == new - old


def test_kv_connector_base_methods(changes):
    added = _methods("0.34.0") - _methods("0.33.0")
    assert added == {"kv_cache_access", "may_load_async", "supports_lookahead_block_hashes"}
    change = changes["serve.connector.base_methods"]
    assert set(change["new"]) - set(change["old"]) == added


def test_the_extensible_kv_cache(changes):
    names = zipfile.ZipFile(wheel("vllm==0.34.0")).namelist()
    assert "vllm/v1/worker/extensible_kv_cache.py" in names
    assert "vllm/v1/worker/extensible_kv_cache.py" not in zipfile.ZipFile(wheel("vllm==0.33.0")).namelist()
    assert changes["kv_cache.extensible"] == {"old": "absent", "new": "on-by-default"}


def test_the_deferred_finalize():
    """0.33 defers V2's wait_for_save to finalize_step (0.32 waited after the forward); 0.34 keeps only V2."""
    for release, defers in (("0.32.0", False), ("0.33.0", True), ("0.34.0", True)):
        text = zipfile.ZipFile(wheel(f"vllm=={release}")).read("vllm/v1/worker/gpu/kv_connector.py").decode()
        assert ("def finalize_step" in text and "defer_finalize" in text) == defers, release
    lines = surface_cli("diff", "0.32.0", "0.33.0").stdout.splitlines()
    assert "  serve.connector.save_wait: v1 after-forward, v2 after-forward -> v1 after-forward, v2 after-draft" in lines
    lines = surface_cli("diff", "0.33.0", "0.34.0").stdout.splitlines()
    assert "  serve.connector.save_wait: v1 after-forward, v2 after-draft -> v2 after-draft" in lines


def test_a_list_probe_diffs_as_added_and_removed():
    lines = surface_cli("diff", "0.33.0", "0.34.0").stdout.splitlines()
    said = next(line for line in lines if line.startswith("  serve.connector.base_methods: "))
    assert said == "  serve.connector.base_methods: +kv_cache_access, +may_load_async, +supports_lookahead_block_hashes"


@pytest.mark.parametrize("release", ["0.33.0", "0.34.0"])
def test_the_shipped_surface_is_the_wheels(release):
    proc = surface_cli("diff", release, str(wheel(f"vllm=={release}")))
    assert proc.returncode == 0 and proc.stdout.splitlines()[1:] == [], proc.stdout
