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
