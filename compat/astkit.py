"""Tiny static probes over Python source (after vllm-spyre's ``has_argument``).

Everything here works on ``ast`` trees parsed from text, so it reads a wheel,
an sdist or a checkout equally and never executes vLLM code.
"""

from __future__ import annotations

import ast
from functools import lru_cache

from .sources import Source


class Reader:
    """Parses (and caches) modules of one :class:`Source` by relative path."""

    def __init__(self, source: Source):
        self.source = source
        self._cache: dict[str, ast.Module | None] = {}

    def text(self, relpath: str) -> str | None:
        return self.source.read(relpath)

    def module(self, relpath: str) -> ast.Module | None:
        if relpath not in self._cache:
            text = self.source.read(relpath)
            self._cache[relpath] = None if text is None else parse(text, relpath)
        return self._cache[relpath]

    def first_module(self, *relpaths: str) -> tuple[str, ast.Module] | tuple[None, None]:
        for relpath in relpaths:
            mod = self.module(relpath)
            if mod is not None:
                return relpath, mod
        return None, None


@lru_cache(maxsize=64)
def parse(text: str, relpath: str = "<source>") -> ast.Module:
    """Parse once per distinct text (probes share modules)."""
    return ast.parse(text, filename=relpath)


def find_class(tree: ast.AST, name: str) -> ast.ClassDef | None:
    """A top-level class (or one nested under ``if``/``try`` at module level)."""
    for node in _module_level(tree):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    return None


def find_function(scope: ast.AST, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """A function defined directly in a module or class body (last definition wins)."""
    found = None
    body = _module_level(scope) if isinstance(scope, ast.Module) else getattr(scope, "body", [])
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            if not _is_overload(node):
                found = node
    return found


def _is_overload(fn: ast.AST) -> bool:
    for deco in getattr(fn, "decorator_list", []):
        name = deco.attr if isinstance(deco, ast.Attribute) else getattr(deco, "id", None)
        if name == "overload":
            return True
    return False


def _module_level(tree: ast.AST):
    stack = list(getattr(tree, "body", []))
    while stack:
        node = stack.pop(0)
        if isinstance(node, (ast.If, ast.Try)):
            stack[0:0] = list(node.body) + list(getattr(node, "orelse", []))
            continue
        yield node


def argument_kind(fn: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> str:
    """``absent`` / ``optional`` / ``required`` for parameter ``name`` of ``fn``."""
    args = fn.args
    positional = args.posonlyargs + args.args
    defaults_from = len(positional) - len(args.defaults)
    for index, arg in enumerate(positional):
        if arg.arg == name:
            return "optional" if index >= defaults_from else "required"
    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
        if arg.arg == name:
            return "required" if default is None else "optional"
    return "absent"


def has_argument(fn: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> bool:
    return argument_kind(fn, name) != "absent"


def parameter_names(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    args = fn.args
    return [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]


def class_field(cls: ast.ClassDef, name: str) -> ast.AnnAssign | None:
    """An annotated class attribute (a dataclass field) named ``name``."""
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if node.target.id == name:
                return node
    return None


def is_initvar(field: ast.AnnAssign) -> bool:
    ann = field.annotation
    if isinstance(ann, ast.Subscript):
        ann = ann.value
    return (isinstance(ann, ast.Name) and ann.id == "InitVar") or (
        isinstance(ann, ast.Attribute) and ann.attr == "InitVar"
    )


def field_default(field: ast.AnnAssign) -> ast.expr | None:
    """The default expression of a dataclass field, looking through ``field(default=...)``."""
    value = field.value
    if isinstance(value, ast.Call) and _call_name(value) in ("field", "Field"):
        if _call_name(value) == "Field" and value.args:
            return value.args[0]
        for kw in value.keywords:
            if kw.arg == "default":
                return kw.value
            if kw.arg == "default_factory":
                return kw.value
        return None
    return value


def _call_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def literal(node: ast.expr | None):
    """``ast.literal_eval`` or a marker string for non-literal expressions."""
    if node is None:
        return "<no default>"
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return f"<expr {ast.unparse(node)}>"


def defines(tree: ast.Module, name: str) -> ast.AST | None:
    """A module-level def/class/assignment of ``name``."""
    for node in _module_level(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return node
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return node
    return None


def imports_name(tree: ast.Module, name: str) -> ast.ImportFrom | None:
    """A module-level ``from x import name`` (a re-export)."""
    for node in _module_level(tree):
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            return node
    return None


def walk_in(fn: ast.AST):
    """``ast.walk`` including nested functions (closures count as the function's body)."""
    return ast.walk(fn)
