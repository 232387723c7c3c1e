"""Probes of transformers that speculators' package import trips over."""

from __future__ import annotations

import ast

from .. import astkit
from ..astkit import Reader
from .base import Reading, Unknown, probe

CONFIG_UTILS = "transformers/configuration_utils.py"


def _imports_torch_at_runtime(tree: ast.Module) -> bool:
    for node in tree.body:  # only unconditional module-level imports count
        if isinstance(node, ast.Import) and any(a.name == "torch" for a in node.names):
            return True
    return False


@probe("transformers.config_torch_annotation", package="transformers")
def config_torch_annotation(reader: Reader):
    """Does PreTrainedConfig annotate a class field with torch.* while importing torch only for type checking?"""
    tree = reader.module(CONFIG_UTILS)
    if tree is None:
        return Unknown(f"{CONFIG_UTILS} not found")
    cls = astkit.find_class(tree, "PreTrainedConfig") or astkit.find_class(tree, "PretrainedConfig")
    if cls is None:
        return Unknown("PreTrainedConfig not found")
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and "torch." in ast.unparse(node.annotation):
            if not _imports_torch_at_runtime(tree):
                return Reading("unresolvable", CONFIG_UTILS, node.lineno)
            return Reading("resolvable", CONFIG_UTILS, node.lineno)
    return Reading("none", CONFIG_UTILS, cls.lineno)
