"""The registry: every patch declaration, judged against a surface.

Selection gives each patch exactly one surface-level verdict (out-of-range,
unknown-surface, not-needed, needed); the rest of the life-cycle is in
:mod:`compat.verdicts`.  Versions are only a coarse prefilter; probe values decide.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import sys
from pathlib import Path

from . import versions
from .declaration import Patch
from .probes import PROBES, Unknown
from .surface import Surface
from .verdicts import VERDICTS, Decision  # noqa: F401  (the life-cycle lives in compat.verdicts)


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
    for package, spec in patch.versions.items():
        versions.in_range(spec, "0")  # raises ValueError on a bad specifier
        if package not in ("vllm", "speculators"):
            raise DeclarationError(f"{patch.id}: unknown package {package!r}")
    for field in ("why", "how", "upstream", "removal", "title"):
        if not getattr(patch, field).strip():
            raise DeclarationError(f"{patch.id}: empty {field}")
    if not patch.edits:
        raise DeclarationError(f"{patch.id}: no edits")
    if not patch.target.isidentifier():
        raise DeclarationError(f"{patch.id}: target {patch.target!r} is not an importable top-level module name")


def judge(patch: Patch, surface: Surface) -> Decision:
    """The surface-level verdict of one patch (never looks at files)."""
    for package, spec in patch.versions.items():
        version = surface.version(package)
        if version is None:
            return Decision(patch, "out-of-range", f"{package} is not installed")
        try:
            inside = versions.in_range(spec, version)
        except ValueError as exc:
            return Decision(patch, "unknown-surface", str(exc))
        if not inside:
            return Decision(patch, "out-of-range", f"{package} {version} not in {spec}")
    variant = surface.value(patch.variant_probe)
    if isinstance(variant, Unknown):
        return Decision(patch, "unknown-surface", f"{patch.variant_probe}: {variant.reason}")
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
