"""The serve path's first question, asked by every other serve probe: has this release vLLM's
``extract_hidden_states`` speculative method at all?  A file another probe cannot find is ``absent`` only when
this reads ``absent``; otherwise it is ``unknown`` (a move is not a removal).

Its own module so that ``vllm.py`` and ``connector.py`` both import it and not each other.
"""

from __future__ import annotations

import ast

from compat import astkit
from compat.astkit import Reader
from compat.probes.base import Reading, Unknown

METHOD = "extract_hidden_states"
SPECULATIVE = ("vllm/config/speculative.py", "vllm/config/__init__.py", "vllm/config.py")


def _constants(tree: ast.AST, value: str):
    return [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value == value]


def _speculative_module(reader: Reader):
    """(relpath, tree) of the first of SPECULATIVE that defines SpeculativeConfig, or (None, Unknown): a module
    that does not define the class (a fallback read after the class moved) says nothing about the method."""
    for relpath in SPECULATIVE:
        tree = reader.module(relpath)
        if tree is not None and astkit.defines(tree, "SpeculativeConfig") is not None:
            return relpath, tree
    return None, Unknown(f"none of {', '.join(SPECULATIVE)} defines SpeculativeConfig (moved or renamed?)")


def _method_reading(reader: Reader):
    relpath, tree = _speculative_module(reader)
    if relpath is None:
        return tree
    hits = _constants(tree, METHOD)
    if hits:
        return Reading("present", relpath, hits[0].lineno)
    if METHOD in (reader.text(relpath) or ""):
        return Unknown(f"{relpath} names {METHOD} but not as a literal")
    return Reading("absent", relpath, None)


def method_absent(reader: Reader, missing: str):
    """``absent`` for a missing file when the release has no extract_hidden_states; otherwise unknown."""
    method = _method_reading(reader)
    if isinstance(method, Reading) and method.value == "absent":
        return Reading("absent", method.file, None)
    return Unknown(f"{missing} although extract_hidden_states is {getattr(method, 'value', 'unknown')}")
