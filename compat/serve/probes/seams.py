"""Probes of the seams between vLLM and a hidden-states KV connector that changed around vLLM 0.33-0.34 (the
extensible KV cache, which both paths meet, is :mod:`compat.probes.kv_extensible`).

Why each is read (so that ``compat surface diff A B`` lists them when they change):

* ``serve.connector.base_methods``: the methods of ``KVConnectorBase_V1``, which vLLM's connector and
  hs-connectors' Mooncake and fp8 connectors subclass; the engine calls a method a subclass inherits (0.34 adds
  ``kv_cache_access``, which decides how the extensible KV cache allocates, ``may_load_async`` and
  ``supports_lookahead_block_hashes``).  A list, so the diff names what was added or removed.
* ``serve.config.speculative_fields``: the fields of ``SpeculativeConfig``, a pydantic dataclass that forbids
  unknown fields, so a ``--speculative-config`` key it dropped (0.34: ``disable_padded_drafter_batch``) stops
  ``vllm serve`` at start-up.
* ``serve.connector.save_wait``: when the worker waits for the connector's saves on each runner.  V1 waits right
  after the forward; Model Runner V2 from 0.33 defers ``wait_for_save`` and ``clear_connector_metadata`` to
  ``finalize_step``, after the speculator (the extractor) ran, while it collects the finished requests before.

Each reads the AST; a shape not seen is ``unknown``.
"""

from __future__ import annotations

import ast

from compat.astkit import Reader
from compat.probes.base import Reading, Unknown, sorted_names
from compat.probes.runner_v2 import v1_removed

from .connector import serve_probe
from .method import _method_reading, _speculative_module, method_absent

BASE = "vllm/distributed/kv_transfer/kv_connector/v1/base.py"
BASE_CLASS = "KVConnectorBase_V1"
V2_CONNECTOR = "vllm/v1/worker/gpu/kv_connector.py"
V2_RUNNER = "vllm/v1/worker/gpu/model_runner.py"
V1_MIXIN = "vllm/v1/worker/kv_connector_model_runner_mixin.py"
V1_RUNNER = "vllm/v1/worker/gpu_model_runner.py"


def _no_method(reader: Reader):
    """The ``absent`` reading where the release has no extract_hidden_states (no serve path to hold a seam)."""
    method = _method_reading(reader)
    return method if isinstance(method, Reading) and method.value == "absent" else None


def _class(tree: ast.Module, name: str) -> ast.ClassDef | None:
    return next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)


def _calls(node: ast.AST, attr: str) -> list[ast.Call]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr == attr]


@serve_probe("serve.connector.base_methods", values=sorted_names("a sorted list of method names", ("absent",)))
def connector_base_methods(reader: Reader):
    """The methods KVConnectorBase_V1 defines (a sorted list): what a connector subclass inherits."""
    if _no_method(reader):
        return _no_method(reader)
    tree = reader.module(BASE)
    if tree is None:
        return method_absent(reader, f"{BASE} not found")
    cls = _class(tree, BASE_CLASS)
    if cls is None:
        return Unknown(f"{BASE_CLASS} not defined in {BASE}")
    names = sorted({n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))})
    return Reading(names, BASE, cls.lineno)


@serve_probe("serve.config.speculative_fields", values=sorted_names("a sorted list of field names", ("absent",)))
def speculative_fields(reader: Reader):
    """The fields of SpeculativeConfig (a sorted list): the keys --speculative-config takes."""
    if _no_method(reader):
        return _no_method(reader)
    relpath, tree = _speculative_module(reader)
    if relpath is None:
        return tree
    cls = _class(tree, "SpeculativeConfig")
    if cls is None:
        return Unknown(f"SpeculativeConfig is not a class in {relpath}")
    names = sorted(s.target.id for s in cls.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                   and not s.target.id.startswith("_") and "ClassVar" not in ast.unparse(s.annotation))
    return Reading(names, relpath, cls.lineno)


def _guard(fn: ast.FunctionDef, call: ast.Call):
    """(parameter, runs with the parameter's default) for a call under ``if <param>:`` / ``if not <param>:``;
    None for an unconditional call; Unknown for another condition."""
    defaults = dict(zip([a.arg for a in fn.args.args][::-1], fn.args.defaults[::-1]))
    for node in ast.walk(fn):
        if not (isinstance(node, ast.If) and any(n is call for n in ast.walk(node))):
            continue
        test, negated = node.test, False
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            test, negated = test.operand, True
        default = defaults.get(getattr(test, "id", None))
        if not isinstance(test, ast.Name) or not isinstance(default, ast.Constant):
            return Unknown(f"post_forward waits for the saves under {ast.unparse(node.test)!r}, a shape not seen")
        return test.id, bool(default.value) != negated
    return None


def _v2_wait(reader: Reader):
    """When Model Runner V2 waits for the saves on a step that ran the model: after-forward, or after-draft (the
    runner passes post_forward the parameter that skips the wait, and finalize_step waits after the speculator);
    None without V2's connector module; Unknown for a shape not seen."""
    tree = reader.module(V2_CONNECTOR)
    if tree is None:
        return None
    functions = [f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)]
    waits = [_guard(f, c) for f in functions if f.name == "post_forward" for c in _calls(f, "wait_for_save")]
    if not waits or any(isinstance(w, Unknown) for w in waits):
        return next((w for w in waits if isinstance(w, Unknown)), Unknown(f"{V2_CONNECTOR}: no post_forward waits"))
    if any(w is not None and not w[1] for w in waits):
        return Unknown(f"{V2_CONNECTOR}: post_forward skips the wait by default, a shape not seen")
    params = {w[0] for w in waits if w is not None}
    runner = reader.module(V2_RUNNER)
    if runner is None:
        return Unknown(f"{V2_RUNNER} not found")
    keywords = {k.arg for c in _calls(runner, "post_forward") for k in c.keywords}
    if keywords - params:
        return Unknown(f"{V2_RUNNER} passes post_forward {', '.join(sorted(keywords - params))}, which no wait reads")
    passed = keywords & params
    finals = [f for f in functions if f.name == "finalize_step" and _calls(f, "wait_for_save")]
    if not passed:
        return "after-forward"  # the model runner always takes the default: it waits right after the forward
    if finals and _calls(runner, "finalize_step"):
        return "after-draft"
    return Unknown(f"{V2_RUNNER} passes post_forward {', '.join(sorted(passed))} and no finalize_step waits")


#: what each runner present says, V1 first (a V1 runner, or V1 removed where V2 is, so never neither)
@serve_probe("serve.connector.save_wait", values=("absent", "v1 after-forward", "v1 after-forward, v2 after-forward",
                                                  "v1 after-forward, v2 after-draft", "v2 after-forward",
                                                  "v2 after-draft"))
def connector_save_wait(reader: Reader):
    """When each runner waits for the connector's saves: ``v1 after-forward``, ``v2 after-forward`` or
    ``v2 after-draft`` (Model Runner V2 defers wait_for_save to finalize_step, after the speculator)."""
    if _no_method(reader):
        return _no_method(reader)
    said = []
    if reader.module(V1_RUNNER) is None and not v1_removed(reader):
        return Unknown(f"{V1_RUNNER} not found, and V1 is not read as removed: moved, not read here")
    if reader.module(V2_CONNECTOR) is None and reader.module(V2_RUNNER) is not None:
        return Unknown(f"{V2_CONNECTOR} not found beside Model Runner V2: moved, not read here")
    if reader.module(V1_RUNNER) is not None:
        mixin = reader.module(V1_MIXIN)
        if mixin is None or not _calls(mixin, "wait_for_save"):
            return Unknown(f"{V1_MIXIN} does not call wait_for_save: where V1 waits is not read")
        said.append("v1 after-forward")
    v2 = _v2_wait(reader)
    if isinstance(v2, Unknown):
        return v2
    if v2 is not None:
        said.append(f"v2 {v2}")
    return Reading(", ".join(said), V2_CONNECTOR if v2 is not None else V1_MIXIN, None)
