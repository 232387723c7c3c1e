"""No two modules of the kit import each other, directly or around a loop (exit_policy <-> verdicts,
probes/serve <-> probes/serve_connector, now serve/probes/vllm and serve/probes/connector, and confirm/cli <->
serve/options were such loops once).

Every import counts, also one inside a function or under TYPE_CHECKING: a loop there still ties two rooms together.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "compat"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)] if node.level else []
            stem = ".".join(base + ([node.module] if node.module else []))
            targets = [f"{stem}.{alias.name}" for alias in node.names] + [stem]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # `from pkg import name`: the module, else its package
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                found.add(target)
    return found


def _graph() -> dict[str, set[str]]:
    files = list(PACKAGE.rglob("*.py"))
    modules = {_module_name(p) for p in files}
    return {_module_name(p): {t for t in _imports(p, modules) if not t.endswith("__init__")} for p in files}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), package faces left out."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_sees_imports_of_every_kind():
    graph = _graph()
    assert "compat.serve.probes.method" in graph["compat.serve.probes.connector"]  # from .method import ...
    assert "compat.shared.options" in graph["compat.serve.options"]  # from compat.shared.options import ...
    assert "compat.serve.files_check" in graph["compat.serve.options"]  # an import inside a function


def test_the_kit_has_no_import_circle():
    assert _circles(_graph()) == []
