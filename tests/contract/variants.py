"""Variants of the installed speculators: written by the kit's own command line, snapshot beside the install,
used by a run through ``sys.path``.

The kit writes each tree a cell needs (``write``: pristine by ``--revert``, each variant by ``--exclude``); each
is copied beside the install (``snapshot``); a run imports its tree from that copy (``use``), and so do the
workers vLLM spawns for it.  So variants run side by side while the installed files hold the full set.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.contract.confirm_api import GEN_MOD


def write(*args: str) -> None:
    """``python -m compat.apply ARGS`` as a user runs it; a refusal ends the harness run with its output."""
    proc = subprocess.run([sys.executable, "-m", "compat.apply", *args], cwd="/", capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"compat.apply {' '.join(args)} -> {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")


def snapshot(root: Path, name: str) -> str:
    """The speculators package exactly as the kit just wrote it, copied to ``root/name``.

    A run puts that directory first on ``sys.path`` (``use``) and imports the variant from there, as do
    the workers vLLM spawns for it; so the variants of a cell run side by side, while the installed files hold
    the full set that compat confirm's command line and its vllm-extract run read."""
    from compat.patcher import open_target

    package = open_target("speculators").path("speculators")
    overlay = Path(root) / name
    shutil.copytree(package, overlay / "speculators", ignore=shutil.ignore_patterns("__pycache__"))
    return str(overlay)


def use(overlay: str):
    """From now on this process imports speculators from ``overlay``, and so do the workers vLLM starts for it
    (a spawned worker gets this ``sys.path`` and PYTHONPATH; a forked one the modules imported here).  Returns
    the generator module, which must come from ``overlay``."""
    sys.path.insert(0, overlay)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (overlay, os.environ.get("PYTHONPATH"))))
    importlib.invalidate_caches()
    module = fresh_generator()
    if not Path(module.__file__).resolve().is_relative_to(Path(overlay).resolve()):
        raise RuntimeError(f"the variant in {overlay} was not imported: {GEN_MOD} came from {module.__file__}")
    return module


def fresh_generator():
    """The generator module as the files are now: every speculators module forgotten first (a forked worker
    inherits the modules imported here, so every file of the variant counts, not only the generator module)."""
    for name in [n for n in sys.modules if n == "speculators" or n.startswith("speculators.")]:
        del sys.modules[name]
    return importlib.import_module(GEN_MOD)


def speculators_imported() -> bool:
    return any(n == "speculators" or n.startswith("speculators.") for n in sys.modules)


def needed_decisions():
    """The installed surface and the registry's needed decisions for it."""
    from compat import registry
    from compat.surface import evaluate, installed_sources

    found = installed_sources()
    surface = evaluate(found["vllm"][1], found["speculators"][1], found["transformers"][1])
    decisions = [d for d in registry.select(surface) if d.verdict == "needed"]
    return surface, decisions


def files(rels) -> dict:
    """The installed bytes of each speculators file ``rels`` names (None: absent)."""
    from compat.patcher import open_target

    dist = open_target("speculators")
    return {rel: dist.path(rel).read_bytes() if dist.path(rel).exists() else None for rel in rels}


def sha256_of(decisions) -> dict:
    """sha256 of every installed file the needed decisions edit."""
    from compat.patcher import open_target

    dist = open_target("speculators")
    return {rel: hashlib.sha256(dist.path(rel).read_bytes()).hexdigest()
            for d in decisions for rel in d.patch.files(d.variant)}


def hashes() -> dict:
    """sha256 of every file any declaration may edit (any generator release), as it is on disk now."""
    from compat.patcher import open_target
    from compat.registry import load_patches

    dist = open_target("speculators")
    rels = sorted({rel for patch in load_patches() if patch.target == "speculators"
                   for variant in patch.edits for rel in patch.files(variant)})
    return {rel: hashlib.sha256(dist.path(rel).read_bytes()).hexdigest() for rel in rels if dist.path(rel).exists()}


def stamps() -> dict:
    """Every file any declaration may edit, with when it was last written: a file the kit rewrote and then put
    back holds the same bytes, not the same mtime."""
    from compat.patcher import open_target

    dist = open_target("speculators")
    return {rel: [sha, dist.path(rel).stat().st_mtime_ns] for rel, sha in hashes().items()}


def construction_view(source: str) -> str:
    """The module's AST without what only ``generate()`` uses: every class's ``generate`` method, and the
    undecorated module-level functions that nothing else in the module refers to (its helpers)."""
    import ast

    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            node.body = [n for n in node.body if not (isinstance(n, ast.FunctionDef) and n.name == "generate")]
    helpers = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef) and not n.decorator_list}
    rest = [n for n in tree.body if not (isinstance(n, ast.FunctionDef) and n.name in helpers)]
    used = {n.id for node in rest for n in ast.walk(node) if isinstance(n, ast.Name)}
    used |= {n.attr for node in rest for n in ast.walk(node) if isinstance(n, ast.Attribute)}
    kept, todo = set(), [name for name in helpers if name in used]
    while todo:  # a helper the construction path uses, and the helpers it uses in turn
        name = todo.pop()
        if name not in kept:
            kept.add(name)
            todo += [n.id for n in ast.walk(helpers[name]) if isinstance(n, ast.Name) and n.id in helpers]
    tree.body = [n for n in tree.body if not (isinstance(n, ast.FunctionDef) and n.name in helpers and n.name not in kept)]
    return ast.dump(tree)


def generate_only(full: dict, variant: dict) -> bool:
    """The variant differs from the full set only in ``generate()`` of the generator module (and its helpers).

    Then an engine built by the full set's ``__init__`` is the variant's engine too (same code, same
    config, same worker and config files), and the variant's ``generate`` can drive it.
    """
    from compat.layout import GENERATOR

    changed = [rel for rel in full if full[rel] != variant.get(rel)]
    if changed != [GENERATOR] or full[GENERATOR] is None or variant[GENERATOR] is None:
        return False
    return construction_view(full[GENERATOR].decode()) == construction_view(variant[GENERATOR].decode())


def load_variant(tag: str, source: bytes):
    """A variant of the generator module from its source (what the kit wrote with ``--exclude tag``), under its
    own name in the same package (the full set's module stays loaded)."""
    import importlib.util

    from compat.layout import GENERATOR
    from compat.patcher import open_target

    path = str(open_target("speculators").path(GENERATOR))
    name = f"{GEN_MOD}__without_{tag.replace('.', '_')}"
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader=None, origin=path))
    module.__file__ = path
    sys.modules[name] = module
    exec(compile(source, path, "exec"), module.__dict__)  # noqa: S102 - the kit's own output for this variant
    return module

