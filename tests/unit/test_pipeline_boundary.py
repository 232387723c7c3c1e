"""The two pipelines are peers: neither package imports the other.

``compat/confirm/`` proves the old path (speculators 0.3/0.4's in-process generator), ``compat/serve/`` the modern
path (speculators >= 0.5 through ``vllm serve``).  What both use (the judge's bounds and routing margins, the
prompts, host memory, the options they resolve alike) lives in ``compat/shared/``, which imports neither; the
``compat confirm`` command (``compat/confirm_command.py``) stands above both and picks one.  A change to one
pipeline then cannot reach into the other's insides, and each can be read on its own.

Every import counts, one inside a function too (``test_import_circles``' reader).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.unit.test_import_circles import _graph

ROOT = Path(__file__).resolve().parents[2]
PIPELINES = ("compat.confirm", "compat.serve")
SHARED = "compat.shared"


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def crossings(graph: dict[str, set[str]]) -> list[str]:
    """``A -> B`` for every import from one pipeline's package into the other's, or from shared into either."""
    found = []
    for module, targets in sorted(graph.items()):
        home = next((p for p in (*PIPELINES, SHARED) if _inside(module, p)), None)
        if home is None:
            continue
        others = [p for p in PIPELINES if p != home]
        found += [f"{module} -> {t}" for t in sorted(targets) if any(_inside(t, p) for p in others)]
    return found


def test_neither_pipeline_imports_the_other_and_shared_imports_neither():
    assert crossings(_graph()) == []


def test_the_reader_sees_a_crossing_inside_a_function():
    """Mutation: one import of the serve package, inside a function of the old path's package, is caught."""
    graph = _graph()
    graph["compat.confirm.report"] = graph["compat.confirm.report"] | {"compat.serve.identity"}
    assert crossings(graph) == ["compat.confirm.report -> compat.serve.identity"]
    graph = _graph()
    graph["compat.shared.tolerance"] = graph["compat.shared.tolerance"] | {"compat.confirm.compare"}
    assert crossings(graph) == ["compat.shared.tolerance -> compat.confirm.compare"]


def test_the_command_above_both_reaches_each_pipeline():
    graph = _graph()
    assert {"compat.confirm.cli", "compat.serve.options"} <= graph["compat.confirm_command"]


def test_the_console_script_runs_the_command_above_both():
    tree = ast.parse((ROOT / "compat" / "cli.py").read_text())
    named = [value.value for node in ast.walk(tree) if isinstance(node, ast.Dict)
             for value in node.values if isinstance(value, ast.Constant)]
    assert "compat.confirm_command" in named
