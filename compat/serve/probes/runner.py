"""The probe ``serve.runner``: which model runner runs ``extract_hidden_states`` under ``vllm serve``.

Why: the kit's proofs ran on one runner, and a record proves a patch only on the runner it ran
(:mod:`compat.proven`).  vLLM picks the runner in ``VllmConfig.use_v2_model_runner`` (the variable
``VLLM_USE_V2_MODEL_RUNNER`` first, then the config's default and its fallbacks to V1), and Model Runner V2 runs
the method only where it has an extractor (``vllm/v1/worker/gpu/spec_decode/extract_hidden_states.py``, 0.29) and
``VllmConfig._get_v2_model_runner_unsupported_features`` does not list the method (0.22-0.28 list every method
but eagle, eagle3, mtp, dflash and dspark; 0.32 lists suffix, medusa, mlp_speculator and custom_class).  vLLM
0.34 has no V1 runner.  The generator's probe (``runner.v2_selected``) asks the same without a speculative
method; this one adds the method.

Values: ``absent`` (no extract_hidden_states), ``v1``, ``v2``, ``by-platform`` (V2 where Triton is, V1 on a CPU
build), ``by-architecture``; with ``(VLLM_USE_V2_MODEL_RUNNER assumed unset)`` where the environment was not read
(a wheel).  :func:`compat.probes.runner_v2.resolve` turns it into the runner of one install.
"""

from __future__ import annotations

import ast

from compat import astkit
from compat.astkit import Reader
from compat.probes.base import Reading, Unknown
from compat.probes.runner_v2 import ASSUMED_UNSET, ENV, ENVS, SELECTED, VLLM_CONFIG, _selection, set_value

from .connector import serve_probe
from .method import METHOD, _method_reading

NAME = "serve.runner"
V2_EXTRACTOR = "vllm/v1/worker/gpu/spec_decode/extract_hidden_states.py"
V2_SPEC_DECODE = "vllm/v1/worker/gpu/spec_decode/__init__.py"  # where V2 picks a speculator by method
V2_PACKAGE = "vllm/v1/worker/gpu/__init__.py"  # Model Runner V2's package (0.12)
UNSUPPORTED = "_get_v2_model_runner_unsupported_features"


def _string_set(node: ast.AST) -> set[str] | None:
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return {e.value for e in node.elts}
    return None


def _method_compare(test: ast.AST):
    """(op, names) for ``<x>.method in (...)`` / ``not in (...)`` / ``== "..."``; None for any other test."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Attribute)
            and test.left.attr == "method"):
        return None
    op, right = test.ops[0], test.comparators[0]
    if isinstance(op, (ast.In, ast.NotIn)):
        names = _string_set(right)
        return (type(op).__name__, names) if names is not None else None
    if isinstance(op, (ast.Eq, ast.NotEq)) and isinstance(right, ast.Constant) and isinstance(right.value, str):
        return ("In" if isinstance(op, ast.Eq) else "NotIn"), {right.value}
    return None


def v2_lists_method(fn: ast.FunctionDef):
    """True when the unsupported-features list names the method, False when not, Unknown when a test on
    ``.method`` has a shape not seen.  A test that ands the method with another feature (parallel drafting,
    pipeline parallelism) is that feature's, which ``vllm serve`` for extraction does not turn on."""
    listed = False
    for node in ast.walk(fn):
        if not isinstance(node, ast.If) or "method" not in _names(node.test):
            continue
        if isinstance(node.test, ast.BoolOp) and isinstance(node.test.op, ast.And):
            continue
        found = _method_compare(node.test)
        if found is None:
            return Unknown(f"{UNSUPPORTED} tests the method as {ast.unparse(node.test)!r}, a shape not seen")
        op, names = found
        listed |= (METHOD in names) if op == "In" else (METHOD not in names)
    return listed


def _names(node: ast.AST) -> set[str]:
    return {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)} | {
        n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def v2_runs_method(reader: Reader, selection):
    """Whether Model Runner V2 can run the method here: (bool, where), or Unknown."""
    if reader.module(V2_EXTRACTOR) is None:
        if METHOD in (reader.text(V2_SPEC_DECODE) or ""):  # V2's speculator dispatch names it: the file moved
            return Unknown(f"{V2_SPEC_DECODE} names {METHOD} but {V2_EXTRACTOR} is not there: moved, not read here")
        return False, None
    if selection.default == "only":
        return True, V2_EXTRACTOR
    if not selection.by_config:
        return Unknown(f"{V2_EXTRACTOR} exists but the runner is chosen outside VllmConfig: not read")
    for relpath in VLLM_CONFIG:
        chain = astkit.class_chain(reader, relpath, "VllmConfig") if reader.module(relpath) is not None else None
        if chain is None:
            continue
        hit = chain.method(UNSUPPORTED)
        if hit is None:
            if "unsupported" in selection.guards:
                return Unknown(f"use_v2_model_runner falls back on unsupported features, but {UNSUPPORTED} is "
                               "not read")
            return True, V2_EXTRACTOR
        listed = v2_lists_method(hit[2])
        if isinstance(listed, Unknown):
            return listed
        return (not listed), f"{hit[0]}:{hit[2].lineno}"
    return Unknown("VllmConfig not found")


@serve_probe(NAME, values=SELECTED)
def serve_runner(reader: Reader):
    """absent / v1 / v2 / by-platform / by-architecture (+ assumed unset where the environment is not read)."""
    method = _method_reading(reader)
    if not isinstance(method, Reading):
        return method
    if method.value == "absent":
        return method
    found = _selection(reader)
    suffix = ASSUMED_UNSET if reader.environ is None else ""
    if isinstance(found, Reading):  # no V2 runner at all
        if reader.module(V2_PACKAGE) is not None:
            return Unknown(f"{V2_PACKAGE} is there but not its model_runner.py: moved, not read here")
        return Reading("v1" + suffix, method.file, method.line)
    if isinstance(found, Unknown):
        return found
    selection, env = found
    runs = v2_runs_method(reader, selection)
    if isinstance(runs, Unknown):
        return runs
    supported, where = runs
    given = set_value(reader, selection, env)
    if isinstance(given, Unknown):
        return given
    value, raw = given
    if value is True and not supported:
        return Unknown(f"{ENV}={raw} asks for Model Runner V2, which cannot run {METHOD} here "
                       f"({where or V2_EXTRACTOR + ' not found'}): whether vLLM refuses or falls back is not read")
    if value is not None:
        return Reading(("v2" if value else "v1") + suffix, ENVS, env.line if env else None)
    if not supported or selection.default == "opt-in":
        file, _, line = (where or f"{selection.file}:{selection.line}").partition(":")
        return Reading("v1" + suffix, file, int(line) if line else None)
    if selection.default == "only":
        return Reading("v2" + suffix, selection.file, selection.line)
    if selection.default == "by-architecture":
        return Reading("by-architecture" + suffix, selection.file, selection.line)
    platform = "triton" in selection.guards or "platform" in selection.guards
    return Reading(("by-platform" if platform else "v2") + suffix, selection.file, selection.line)
