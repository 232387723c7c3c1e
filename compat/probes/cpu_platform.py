"""Probes of what vLLM's CPU platform demands of the host before a worker starts."""

from __future__ import annotations

import ast

from ..astkit import Reader
from .base import Reading, Unknown, names_joined, probe

CPU_WORKER = "vllm/v1/worker/cpu_worker.py"
CHECK = "check_preloaded_libs"


@probe("platform.cpu_preload_required",
       values=names_joined("library names joined by commas", fixed=("none",)))
def cpu_preload_required(reader: Reader):
    """Libraries vLLM's CPU worker refuses to start without in LD_PRELOAD (comma-separated), or none."""
    tree = reader.module(CPU_WORKER)
    if tree is None:
        return Unknown(f"{CPU_WORKER} not found")
    checks = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == CHECK]
    if not checks:
        return Reading("none", CPU_WORKER, None)
    if not any(isinstance(n, ast.Raise) for check in checks for n in ast.walk(check)):
        return Reading("none", CPU_WORKER, checks[0].lineno)  # 0.17 and 0.19+: a warning only
    names = _constant_arguments(tree, CHECK)
    if names is None:
        return Unknown(f"{CPU_WORKER}: {CHECK} is called with an argument this probe cannot read")
    return Reading(",".join(sorted(set(names))) or "none", CPU_WORKER, checks[0].lineno)


PLATFORMS = "vllm/platforms/__init__.py"
MATCHER = "vllm_version_matches_substr"


@probe("platform.cpu_detected_through", values=names_joined("distribution names joined by commas"))
def cpu_detected_through(reader: Reader):
    """The distribution names whose version vLLM reads to detect a CPU build (comma-separated), in order."""
    tree = reader.module(PLATFORMS)
    if tree is None:
        return Unknown(f"{PLATFORMS} not found")
    matcher = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == MATCHER), None)
    if matcher is None:
        return Unknown(f"{PLATFORMS} has no {MATCHER}: vLLM detects its platform some other way")
    names = _constant_arguments(matcher, "version")
    if names is None:
        return Unknown(f"{PLATFORMS}: {MATCHER} reads a version this probe cannot name")
    if not names:
        return Unknown(f"{PLATFORMS}: {MATCHER} reads no distribution version")
    return Reading(",".join(dict.fromkeys(sorted(names, key=lambda n: _line(matcher, n)))), PLATFORMS, matcher.lineno)


def _constant_arguments(scope: ast.AST, callee: str) -> list | None:
    """The one constant argument of each call to the plain name ``callee`` in ``scope``, in walk order; None when
    a call passes anything else (the probe cannot read it)."""
    values = []
    for node in ast.walk(scope):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == callee:
            if len(node.args) != 1 or not isinstance(node.args[0], ast.Constant):
                return None
            values.append(node.args[0].value)
    return values


def _line(fn: ast.FunctionDef, name: str) -> int:
    return min(n.lineno for n in ast.walk(fn) if isinstance(n, ast.Constant) and n.value == name)
