"""Tiny static probes over Python source (after vllm-spyre's ``has_argument``).

Everything here works on ``ast`` trees parsed from text, so it reads a wheel,
an sdist or a checkout equally and never executes vLLM code.  Lookups follow
base classes, mixins and ``from x import y`` re-exports inside the package,
and say when they could not (so probes answer ``unknown``, not a guess).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Mapping

from .sources import Source

#: Bases outside the package that cannot define vLLM's API (a lookup may stop there).
NEUTRAL_BASES = frozenset({
    "object", "ABC", "abc.ABC", "Protocol", "typing.Protocol", "Generic", "typing.Generic",
    "nn.Module", "torch.nn.Module", "Enum", "enum.Enum", "IntEnum", "enum.IntEnum", "NamedTuple",
})

#: Function decorators known to keep the decorated signature.
TRANSPARENT_DECORATORS = frozenset({
    "override", "typing.override", "typing_extensions.override", "overload", "property",
    "cached_property", "functools.cached_property", "staticmethod", "classmethod",
    "abstractmethod", "abc.abstractmethod", "torch.inference_mode", "torch.no_grad",
    "inference_mode", "no_grad",
})

_MAX_HOPS = 8  # re-export chains and base-class depth


class NotLiteral(ValueError):
    """An expression whose value cannot be known without running code."""


class Reader:
    """Parses (and caches) modules of one :class:`Source` by relative path.

    ``environ`` is the environment the source's code will run in, when known
    (an installed vLLM runs in this process's environment); ``None`` for a
    wheel, sdist or tree, whose environment is not known.  Without an explicit
    one it is taken from the source's ``environ`` attribute, if any.
    """

    def __init__(self, source: Source, environ: Mapping[str, str] | None = None):
        self.source = source
        self.environ = environ if environ is not None else getattr(source, "environ", None)
        self._cache: dict[str, ast.Module | None] = {}

    def text(self, relpath: str) -> str | None:
        return self.source.read(relpath)

    def module(self, relpath: str) -> ast.Module | None:
        if relpath not in self._cache:
            text = self.source.read(relpath)
            self._cache[relpath] = None if text is None else parse(text, relpath)
        return self._cache[relpath]

    def module_path(self, dotted: str) -> str | None:
        """``a.b.c`` -> ``a/b/c.py`` or ``a/b/c/__init__.py``, whichever exists."""
        base = dotted.replace(".", "/")
        for relpath in (f"{base}.py", f"{base}/__init__.py"):
            if self.module(relpath) is not None:
                return relpath
        return None


@lru_cache(maxsize=64)
def parse(text: str, relpath: str = "<source>") -> ast.Module:
    """Parse once per distinct text (probes share modules)."""
    return ast.parse(text, filename=relpath)


def names_used(tree: ast.AST) -> frozenset[str]:
    """Every name, attribute and imported name (its alias, if any) in ``tree``; walked once per tree and kept on
    it (probes ask a module about many names, and a walk of vLLM's largest modules costs a tenth of a second)."""
    found = getattr(tree, "_compat_names_used", None)
    if found is None:
        found = frozenset(
            node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute)
            else node.asname or node.name
            for node in ast.walk(tree) if isinstance(node, (ast.Name, ast.Attribute, ast.alias)))
        tree._compat_names_used = found
    return found


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
    return any(dotted_name(d) in ("overload", "typing.overload") for d in getattr(fn, "decorator_list", []))


def _module_level(tree: ast.AST):
    stack = list(getattr(tree, "body", []))
    while stack:
        node = stack.pop(0)
        if isinstance(node, (ast.If, ast.Try)):
            stack[0:0] = list(node.body) + list(getattr(node, "orelse", []))
            continue
        yield node


def dotted_name(node: ast.AST) -> str | None:
    """``a.b.c`` for a Name/Attribute chain (a call's callee for a decorator call), else None."""
    if isinstance(node, ast.Call):
        node = node.func
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def opaque_decorators(fn: ast.AST) -> list[str]:
    """Decorators of ``fn`` that might change its signature (not in TRANSPARENT_DECORATORS)."""
    names = [dotted_name(d) or ast.unparse(d) for d in getattr(fn, "decorator_list", [])]
    return [n for n in names if n not in TRANSPARENT_DECORATORS]


# -- names across modules -------------------------------------------------------


def _absolute(relpath: str, node: ast.ImportFrom) -> str | None:
    """The dotted module an ``ImportFrom`` in ``relpath`` names (relative imports resolved)."""
    if not node.level:
        return node.module
    package = relpath[: -len(".py")].split("/")
    package = package[:-1]  # the module's package (also right for __init__.py)
    if node.level > 1:
        package = package[: len(package) - (node.level - 1)]
    return ".".join(package + ([node.module] if node.module else [])) or None


def resolve_name(reader: Reader, relpath: str, name: str) -> tuple[str, ast.AST] | None:
    """Where ``name`` as seen from module ``relpath`` is defined: follows ``from x import``
    re-exports inside the package; None when it is neither defined nor imported from it."""
    top = relpath.split("/", 1)[0]
    for _ in range(_MAX_HOPS):
        tree = reader.module(relpath)
        if tree is None:
            return None
        node = defines(tree, name)
        if node is not None:
            return relpath, node
        imported = imports_name(tree, name)
        if imported is None:
            return None
        module = _absolute(relpath, imported)
        if not module or module.split(".", 1)[0] != top:
            return None
        name = next(a.name for a in imported.names if (a.asname or a.name) == name)
        target = reader.module_path(module)
        if target is None:
            return None
        relpath = target
    return None


# -- classes, bases and members ------------------------------------------------------


@dataclass
class ClassChain:
    """A class and the bases that could be read, in method-resolution order.

    ``unread`` names bases outside the package or not found: a member missing
    from ``classes`` may still come from one of those.
    """

    classes: list[tuple[str, ast.ClassDef]] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)

    def method(self, name: str, after: ast.ClassDef | None = None):
        """(relpath, class, function) of the first definition of ``name`` (after class ``after``)."""
        seen_after = after is None
        for relpath, cls in self.classes:
            if not seen_after:
                seen_after = cls is after
                continue
            fn = find_function(cls, name)
            if fn is not None:
                return relpath, cls, fn
        return None

    def annotated(self, name: str):
        """(relpath, class, AnnAssign) of the first annotated class attribute ``name``."""
        for relpath, cls in self.classes:
            node = class_field(cls, name)
            if node is not None:
                return relpath, cls, node
        return None

    @property
    def complete(self) -> bool:
        return not self.unread


def class_chain(reader: Reader, relpath: str, name: str) -> ClassChain | None:
    """The class ``name`` of module ``relpath`` with its bases in C3 order (None if the class is not there)."""
    found = resolve_name(reader, relpath, name)
    if found is None or not isinstance(found[1], ast.ClassDef):
        return None
    chain = ClassChain()
    chain.classes = _linearize(reader, found[0], found[1], chain.unread, 0)
    return chain


def _linearize(reader: Reader, relpath: str, cls: ast.ClassDef, unread: list, depth: int) -> list:
    """Python's C3 method-resolution order over the bases that can be read."""
    parents = []
    for base in cls.bases:
        expr = base.value if isinstance(base, ast.Subscript) else base
        label = dotted_name(expr) or ast.unparse(base)
        if label in NEUTRAL_BASES:
            continue
        target = resolve_name(reader, relpath, label) if isinstance(expr, ast.Name) else None
        if target is None or not isinstance(target[1], ast.ClassDef) or depth >= _MAX_HOPS:
            unread.append(f"{label} (in {relpath})")
            continue
        parents.append(_linearize(reader, target[0], target[1], unread, depth + 1))
    return [(relpath, cls), *_merge([*parents, [p[0] for p in parents]], unread)]


def _merge(sequences: list, unread: list) -> list:
    key = lambda item: (item[0], item[1].name)  # noqa: E731
    sequences = [list(s) for s in sequences if s]
    out = []
    while sequences:
        for seq in sequences:
            head = seq[0]
            if not any(key(head) in map(key, other[1:]) for other in sequences):
                break
        else:
            unread.append("an inconsistent base-class order")
            return out
        out.append(head)
        sequences = [[i for i in s if key(i) != key(head)] for s in sequences]
        sequences = [s for s in sequences if s]
    return out


# -- signatures and fields ---------------------------------------------------------------


def argument_kind(fn: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> str:
    """``absent`` / ``optional`` / ``required`` for an explicit parameter ``name`` of ``fn``."""
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


def forwards_kwargs_to_super(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Does ``fn`` pass its ``**kwargs`` on to ``super().<same name>(...)``?"""
    kwarg = fn.args.kwarg.arg if fn.args.kwarg else None
    if kwarg is None:
        return False
    for node in ast.walk(fn):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == fn.name
            and isinstance(node.func.value, ast.Call)
            and dotted_name(node.func.value.func) == "super"
            and any(k.arg is None and isinstance(k.value, ast.Name) and k.value.id == kwarg for k in node.keywords)
        ):
            return True
    return False


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


def field_default(field_node: ast.AnnAssign) -> ast.expr | None:
    """The default expression of a dataclass field, looking through ``field(default=...)``.

    None means the field has no default; a ``default_factory`` is returned as is
    (and is not a literal).
    """
    value = field_node.value
    if isinstance(value, ast.Call) and _call_name(value) in ("field", "Field"):
        if _call_name(value) == "Field" and value.args:
            return value.args[0]
        for kw in value.keywords:
            if kw.arg in ("default", "default_factory"):
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


def literal(node: ast.expr):
    """The value of a literal expression; :class:`NotLiteral` for anything computed."""
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError) as exc:
        raise NotLiteral(f"not a literal: {ast.unparse(node)}") from exc


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
