"""Every comparison of a probe's value in the kit's code, and those with a value the probe does not declare.

Why here and not in the kit: it parses modules, which no command needs at run time (``compat apply --dry-run``
stays cheap); the unit tests run it over every module of ``compat/`` (tests/unit/test_probe_values.py), so a plan
rule comparing a probe with a value the probe never returns fails there, named by file and line.  Patch
declarations and rule tables are checked at load time by :func:`compat.registry.check_rule_values`.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from compat.probes import PROBES

#: the comparison operators whose other side names a probe value (``==``, ``!=``, ``is``, ``is not``)
_EQUALITY = (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)
_MEMBERSHIP = (ast.In, ast.NotIn)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def undeclared_comparisons(path: Path | str) -> list[str]:
    """``file:line: ...`` for each comparison in the module at ``path`` of a probe's value, read by name, with a
    value the probe does not declare (a rule that can never fire, or fires on a shape not seen).  For a unit test
    over every module of the kit: it parses the module, so it is never run at apply time."""
    return [f"{where}: {name} compared with {value!r}, which it does not declare (declared: {PROBES[name].declared})"
            for where, name, value in probe_comparisons(path) if not PROBES[name].declares(value)]


def probe_comparisons(path: Path | str) -> list[tuple[str, str, object]]:
    """(``file:line``, probe, value) for each constant a probe's value is compared with in the module at ``path``.

    A probe's value is read by name: ``v("name")`` (``v = surface.values.get``), ``surface.value("name")``,
    ``surface.values.get("name")``, ``values["name"]``, or a local name every assignment of which is one of those
    (``value = surface.values.get("name")``; ``a, b = surface.values.get("name"), ...``).  It is compared by
    ``==`` / ``!=`` / ``is`` / ``is not`` with a constant, ``in`` / ``not in`` a tuple, list or set of constants, or
    looked up in a dict literal (``{"value": ...}.get(read)``, its keys).  A value passed to another function is
    not followed."""
    tree = ast.parse(Path(path).read_text(), filename=str(path))
    found = []
    for scope in [tree, *(n for n in ast.walk(tree) if isinstance(n, _SCOPES))]:
        nodes = list(_own_nodes(scope))
        bound = _bound_reads(nodes)
        for node in nodes:
            found += [(f"{path}:{node.lineno}", name, value) for name, value in _compared(node, bound)]
    return sorted(found, key=lambda item: (int(item[0].rpartition(":")[2]), item[1]))


def _own_nodes(scope: ast.AST):
    """The nodes of ``scope`` outside the functions, lambdas and classes nested in it (each is a scope of its own)."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, _SCOPES):
            stack.extend(ast.iter_child_nodes(node))


def _probe_read(node: ast.AST) -> str | None:
    """The probe ``node`` reads by name (a registered probe's name as a string constant), or None."""
    if isinstance(node, ast.Subscript):
        key = node.slice
        return key.value if isinstance(key, ast.Constant) and key.value in PROBES else None
    if not (isinstance(node, ast.Call) and node.args and not node.keywords):
        return None
    first, callee = node.args[0], node.func
    getter = (isinstance(callee, ast.Name) and len(node.args) == 1) or (
        isinstance(callee, ast.Attribute) and callee.attr in ("get", "value") and len(node.args) <= 2)
    named = isinstance(first, ast.Constant) and isinstance(first.value, str) and first.value in PROBES
    return first.value if getter and named else None


def _assignments(nodes):
    """(local name, expression) for each name assigned one expression: ``x = e``, ``x: T = e``, ``(x := e)``, and
    ``x, y = e1, e2`` pairwise."""
    for node in nodes:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    yield target.id, node.value
                elif (isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                      and len(target.elts) == len(node.value.elts)):
                    yield from ((t.id, v) for t, v in zip(target.elts, node.value.elts) if isinstance(t, ast.Name))
        elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and isinstance(node.target, ast.Name) and node.value:
            yield node.target.id, node.value


def _bound_reads(nodes) -> dict[str, str]:
    """Local name -> the probe it holds, where every store of the name assigns a read of that one probe (a name
    also bound otherwise, by a loop or an unpacking of something else, holds no one probe's value)."""
    reads: dict[str, list] = {}
    for name, value in _assignments(nodes):
        reads.setdefault(name, []).append(_probe_read(value))
    stores = Counter(n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
    return {name: probes[0] for name, probes in reads.items()
            if probes[0] is not None and set(probes) == {probes[0]} and stores[name] == len(probes)}


def _read_of(node: ast.AST, bound: dict[str, str]) -> str | None:
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
        return bound.get(node.id)
    return _probe_read(node)


def _members(node: ast.AST) -> list | None:
    """The constants of a tuple, list or set of constants; None for anything else."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and all(isinstance(e, ast.Constant) for e in node.elts):
        return [e.value for e in node.elts]
    return None


def _compared(node: ast.AST, bound: dict[str, str]):
    """(probe, value) for each constant ``node`` compares a probe's value with (see :func:`probe_comparisons`)."""
    if isinstance(node, ast.Compare):
        sides = [node.left, *node.comparators]
        for left, op, right in zip(sides, node.ops, sides[1:]):
            if isinstance(op, _EQUALITY):
                for read, other in ((left, right), (right, left)):
                    name = _read_of(read, bound)
                    if name and isinstance(other, ast.Constant) and other.value is not None:
                        yield name, other.value
            elif isinstance(op, _MEMBERSHIP):
                name, members = _read_of(left, bound), _members(right)
                if name and members is not None:
                    yield from ((name, value) for value in members if value is not None)
    table, key = _dict_lookup(node) or (None, None)
    name = _read_of(key, bound) if key is not None else None
    if name:
        yield from ((name, k.value) for k in table.keys if isinstance(k, ast.Constant))


def _dict_lookup(node: ast.AST):
    """(dict literal, key expression) for ``{...}.get(key)`` or ``{...}[key]``; None otherwise."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
            and isinstance(node.func.value, ast.Dict) and node.args):
        return node.func.value, node.args[0]
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Dict):
        return node.value, node.slice
    return None
