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


@probe("transformers.config_torch_annotation", package="transformers", values=("none", "resolvable", "unresolvable"))
def config_torch_annotation(reader: Reader):
    """Does PreTrainedConfig annotate a class field with torch.* while importing torch only for type checking?"""
    if reader.module(CONFIG_UTILS) is None:
        return Unknown(f"{CONFIG_UTILS} not found")
    chain = astkit.class_chain(reader, CONFIG_UTILS, "PreTrainedConfig") or astkit.class_chain(
        reader, CONFIG_UTILS, "PretrainedConfig"
    )
    if chain is None:
        return Unknown("PreTrainedConfig not found")
    for relpath, cls in chain.classes:  # annotations of bases and mixins are resolved too
        for node in cls.body:
            if isinstance(node, ast.AnnAssign) and "torch." in ast.unparse(node.annotation):
                tree = reader.module(relpath)
                if not _imports_torch_at_runtime(tree):
                    return Reading("unresolvable", relpath, node.lineno)
                return Reading("resolvable", relpath, node.lineno)
    if not chain.complete:
        return Unknown(f"PreTrainedConfig fields may come from {', '.join(chain.unread)}")
    return Reading("none", chain.classes[0][0], chain.classes[0][1].lineno)


ATTN_MASK_UTILS = "transformers/modeling_attn_mask_utils.py"


@probe("transformers.prepare_4d_causal_attention_mask", package="transformers", values=("absent", "present"))
def prepare_4d_causal_attention_mask(reader: Reader):
    """Can speculators import _prepare_4d_causal_attention_mask from transformers.modeling_attn_mask_utils? present / absent."""
    if reader.module(CONFIG_UTILS) is None:
        return Unknown(f"{CONFIG_UTILS} not found: not a transformers source")
    tree = reader.module(ATTN_MASK_UTILS)
    if tree is None:
        return Reading("absent", None, None)  # transformers 5.24.0 removed the module
    node = astkit.find_function(tree, "_prepare_4d_causal_attention_mask")
    if node is not None:
        return Reading("present", ATTN_MASK_UTILS, node.lineno)
    if any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in tree.body):
        return Unknown(f"{ATTN_MASK_UTILS} defines no _prepare_4d_causal_attention_mask; it may re-export one")
    return Reading("absent", ATTN_MASK_UTILS, None)
