"""The registry: every patch declaration, judged against a surface.

Selection gives each patch exactly one surface-level verdict (out-of-range,
unknown-surface, not-needed, needed); the rest of the life-cycle is in
:mod:`compat.verdicts`.  Versions are only a coarse prefilter; probe values decide.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
import sys
from collections import Counter
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Iterable

from . import builds, upstream_facts, versions
from .declaration import Patch
from .probes import PROBES, Unknown
from .surface import Surface, known_releases
from .verdicts import VERDICTS, Decision  # noqa: F401  (the life-cycle lives in compat.verdicts)


#: The packages a declaration's version prefilter may name.
PREFILTERED = ("vllm", "speculators")


class DeclarationError(Exception):
    """A malformed patch declaration (a bug in this kit, caught by unit tests)."""


def _patch_package():
    """``compat.patches``: installed as a subpackage, or the repo's ``patches/`` folder."""
    try:
        return importlib.import_module("compat.patches")
    except ModuleNotFoundError:
        pass
    folder = Path(__file__).resolve().parent.parent / "patches"
    spec = importlib.util.spec_from_file_location(
        "compat.patches", folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    if spec is None or not (folder / "__init__.py").is_file():
        raise DeclarationError(f"patch declarations not found (looked for compat.patches and {folder})")
    module = importlib.util.module_from_spec(spec)
    sys.modules["compat.patches"] = module
    spec.loader.exec_module(module)
    return module


def load_patches(path: str = "") -> list[Patch]:
    """Every ``PATCH`` in ``compat.patches`` (or its subpackage ``path``, e.g. ``"serve"`` for the modern
    path's declarations), in module-name order (the apply order)."""
    package = _patch_package()
    if path:
        package = importlib.import_module(f"{package.__name__}.{path}")
    patches = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.name.startswith("_") or info.ispkg:
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        patch = getattr(module, "PATCH", None)
        if not isinstance(patch, Patch):
            raise DeclarationError(f"{module.__name__} defines no PATCH")
        validate(patch)
        patches.append(patch)
    ids = [p.id for p in patches]
    if len(set(ids)) != len(ids):
        raise DeclarationError(f"duplicate patch ids in {ids}")
    return patches


def validate(patch: Patch) -> None:
    for name in (*patch.requires, patch.variant_probe):
        if name not in PROBES:
            raise DeclarationError(f"{patch.id}: unknown probe {name!r}")
    _validate_values(patch)
    for package, spec in patch.versions.items():
        versions.in_range(spec, "0")  # raises ValueError on a bad specifier
        if package not in PREFILTERED:
            raise DeclarationError(f"{patch.id}: unknown package {package!r}")
    for field in ("why", "how", "upstream", "removal", "title"):
        if not getattr(patch, field).strip():
            raise DeclarationError(f"{patch.id}: empty {field}")
    if not patch.edits:
        raise DeclarationError(f"{patch.id}: no edits")
    if set(patch.known_loss) & set(patch.edits):
        raise DeclarationError(f"{patch.id}: a variant cannot both have edits and a known loss")
    if not patch.target.isidentifier():
        raise DeclarationError(f"{patch.id}: target {patch.target!r} is not an importable top-level module name")


def _validate_values(patch: Patch) -> None:
    """Every value the declaration names is one its probe declares (:attr:`compat.probes.base.ProbeSpec.values`):
    a precondition or a variant no probe can return would never match, and the patch would silently never apply."""
    for name, accepted in patch.requires.items():
        if not isinstance(accepted, tuple) or not accepted:  # a bare string would match its substrings
            raise DeclarationError(f"{patch.id}: requires[{name!r}] must be a non-empty tuple of values, "
                                   f"not {accepted!r}")
        check_rule_values(patch.id, ((name, value) for value in accepted), "requires")
    check_rule_values(patch.id, ((patch.variant_probe, variant) for variant in patch.edits), "edits variant")
    check_rule_values(patch.id, ((patch.variant_probe, variant) for variant in patch.known_loss), "known_loss variant")


def check_rule_values(owner: str, pairs: Iterable[tuple[str, object]], role: str = "compares") -> None:
    """Raise :class:`DeclarationError` naming ``owner``, the probe, the value and the declared values for the first
    (probe, value) of ``pairs`` whose probe is not registered or does not declare the value: a patch declaration's
    preconditions and variants, or a plan rule table (``compat.plan.INCOMPATIBLE``).  Lookups only, no parsing."""
    for name, value in pairs:
        spec = PROBES.get(name)
        if spec is None:
            raise DeclarationError(f"{owner}: {role} unknown probe {name!r}")
        if not spec.declares(value):
            raise DeclarationError(f"{owner}: {role} {name}={value!r}, a value {name} does not declare "
                                   f"(declared: {spec.declared})")


# -- comparisons in code ----------------------------------------------------------------------------------------

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


@lru_cache(maxsize=None)
def release_lines(package: str) -> tuple[str, ...]:
    """The releases a version of ``package`` is ordered against (the shipped vLLM surfaces, speculators' table)."""
    if package == "vllm":
        return tuple(known_releases())
    return tuple(upstream_facts.SPECULATORS_GENERATOR)


def judge(patch: Patch, surface: Surface) -> Decision:
    """The surface-level verdict of one patch (never looks at files): versions and probes, then the build."""
    decision = _by_versions_and_probes(patch, surface)
    return _by_build(patch, surface, decision) if patch.build else decision


def _by_build(patch: Patch, surface: Surface, decision: Decision) -> Decision:
    """A patch of one build's code (``Patch.build``) is out of range on another build; unknown where the build
    cannot be read and the probes would have it applied."""
    if decision.verdict not in ("needed", "unknown-surface"):
        return decision
    info = surface.packages.get("vllm") or {}
    build = builds.build_of(info)
    if build == patch.build:
        return decision
    if build is None:
        if decision.verdict == "unknown-surface":
            return decision
        return replace(decision, verdict="unknown-surface", reason=(
            f"{decision.reason}; but whether {info.get('name') or 'vllm'} {info.get('version')} is a "
            f"{patch.build} build could not be read (its distribution name and version tag do not say)"))
    return Decision(patch, "out-of-range", f"{info.get('name')} {info.get('version')} is not a {patch.build} build: "
                    f"this bug's code runs only on vLLM's {patch.build} build", decision.variant)


def _by_versions_and_probes(patch: Patch, surface: Surface) -> Decision:
    """The verdict of the version prefilter and the probes.

    The version prefilter is a coarse bound; the probes decide.  Below the
    bound a probe that cannot be read does not matter (out-of-range), but a
    probe that reads the change as present is not overruled: the verdict is
    unknown-surface with both facts.  A version that does not order with the
    releases leaves the prefilter unknown, and the probes decide alone.
    """
    outside, unordered, outside_packages = [], [], set()
    for package, spec in patch.versions.items():
        version = surface.version(package)
        if version is None and surface.packages.get(package) is not None:  # there, but its version unreadable
            why = surface.packages[package].get("unread") or "its version could not be read"
            return Decision(patch, "unknown-surface", f"{package} version unknown: {why}")
        if version is None:
            return Decision(patch, "out-of-range", f"{package} is not installed")
        try:
            inside = versions.prefilter(spec, version, release_lines(package))
        except ValueError as exc:
            return Decision(patch, "unknown-surface", str(exc))
        if inside is None:
            unordered.append((package, f"{package} {version} does not order with {package} releases"))
        elif not inside:
            outside.append(f"{package} {version} not in {spec}")
            outside_packages.add(package)
    decision = _by_probes(patch, surface)
    if outside:
        # a precondition, or a variant probe of the package the label puts out of range (the serve patches K4,
        # K12, K13: requires={}), that reads the bug as present is not overruled by the label
        # (the old path's variant, speculators.generator, stands for speculators' version: the label decides there)
        reads_it = patch.requires or (patch.variant_probe != "speculators.generator"
                                      and PROBES[patch.variant_probe].package in outside_packages)
        if decision.verdict == "needed" and reads_it:
            return replace(decision, verdict="unknown-surface", reason=(
                f"the version prefilter says too old ({'; '.join(outside)}), but the probes read the change as "
                f"present ({decision.reason}): a backport or a vendor build? check by hand"))
        return Decision(patch, "out-of-range", "; ".join(outside), decision.variant)
    if unordered:
        said = "; ".join(text for _, text in unordered)
        # the generator probe stands for speculators' version; nothing stands for vLLM's but a precondition
        if decision.verdict == "needed" and not patch.requires and any(p != "speculators" for p, _ in unordered):
            return replace(decision, verdict="unknown-surface", reason=f"{said}, and no probe decides")
        return replace(decision, reason=f"{decision.reason} ({said}: the probes decide)")
    return decision


def _by_probes(patch: Patch, surface: Surface) -> Decision:
    """The verdict the probes alone give: the generator variant, retirement, then the precondition."""
    variant = surface.value(patch.variant_probe)
    if isinstance(variant, Unknown):
        return Decision(patch, "unknown-surface", f"{patch.variant_probe}: {variant.reason}")
    if variant in patch.known_loss:  # the same bug, no variant of the patch: never "not-needed"
        return Decision(patch, "known-loss", f"{patch.variant_probe}={variant} has the same bug and no variant of "
                        f"this patch: wrong or lost at {patch.known_loss[variant]}", variant)
    if variant not in patch.edits:  # before the probes: an unreadable probe cannot matter to this generator
        return Decision(patch, "not-needed", f"{patch.variant_probe}={variant} has no such bug", variant)
    if patch.retired:  # after the generator check: an unreadable generator stays unknown-surface
        return Decision(patch, "not-needed", "retired: a run showed no bug without it (PATCHES.md)", variant)
    unknown = {n: surface.value(n) for n in patch.requires if isinstance(surface.value(n), Unknown)}
    if unknown:
        detail = "; ".join(f"{n}: {u.reason}" for n, u in unknown.items())
        return Decision(patch, "unknown-surface", detail, variant)
    for name, accepted in patch.requires.items():
        value = surface.value(name)
        if value not in accepted:
            wanted = " or ".join(map(str, accepted))
            return Decision(patch, "not-needed", f"{name}={value} (needed when {wanted})", variant)
    why = ", ".join(f"{n}={surface.value(n)}" for n in patch.requires) or "always for this generator"
    return Decision(patch, "needed", why, variant)


def select(surface: Surface, patches: list[Patch] | None = None) -> list[Decision]:
    return [judge(p, surface) for p in (load_patches() if patches is None else patches)]
