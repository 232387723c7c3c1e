"""The probe ``request.prompt_token_ids``: what ``Request`` keeps its prompt's token ids in.

Why: both pipelines read a request's prompt ids (speculators' generator builds ``Request`` objects itself; vLLM's
hidden-states connector writes them beside each file as ``token_ids``).  Up to vLLM 0.33 ``Request.__init__``
stores the list it is given; 0.34 copies it into a ``TokenBuffer`` (``vllm/v1/token_buffer.py``, an ``array('i')``
whose slices are lists), and code that took it for a list (``torch.tensor(ids)``, ``ids + [...]``, ``json``)
meets another type.  ``list`` / ``TokenBuffer`` from the AST of ``Request.__init__``; any other shape is unknown.
"""

from __future__ import annotations

import ast

from .. import astkit
from ..astkit import Reader
from .base import Reading, Unknown, probe

REQUEST = "vllm/v1/request.py"
ATTRIBUTE = "prompt_token_ids"


def _stored(init: ast.FunctionDef):
    """The value ``self.prompt_token_ids`` is set to in ``__init__`` (its one assignment), or None."""
    found = []
    for node in ast.walk(init):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) and node.value is not None else []
        if any(isinstance(t, ast.Attribute) and t.attr == ATTRIBUTE and astkit.dotted_name(t.value) == "self"
               for t in targets):
            found.append(node)
    return found[0] if len(found) == 1 else None


def _wrapper(value: ast.AST) -> str | None:
    """``TokenBuffer`` for ``TokenBuffer(x)`` (or ``TokenBuffer(x) if x is not None else None``), ``list`` for the
    parameter itself; None for anything else."""
    if isinstance(value, ast.IfExp):
        branches = [b for b in (value.body, value.orelse) if not (isinstance(b, ast.Constant) and b.value is None)]
        if len(branches) != 1:
            return None
        value = branches[0]
    if isinstance(value, ast.Name) and value.id == ATTRIBUTE:
        return "list"
    if isinstance(value, ast.Call) and len(value.args) == 1 and isinstance(value.args[0], ast.Name) \
            and value.args[0].id == ATTRIBUTE:
        return (astkit.dotted_name(value.func) or "").split(".")[-1] or None
    return None


#: ``_wrapper`` names whatever callable wraps the ids; only these two were read in a release, and any other is
#: undeclared, so unknown (as this module says)
@probe("request.prompt_token_ids", values=("list", "TokenBuffer"))
def request_prompt_token_ids(reader: Reader):
    """What Request keeps the prompt's token ids in: list / TokenBuffer."""
    tree = reader.module(REQUEST)
    if tree is None:
        return Unknown(f"{REQUEST} not found")
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Request"), None)
    init = astkit.find_function(cls, "__init__") if cls is not None else None
    if init is None:
        return Unknown(f"Request.__init__ not found in {REQUEST}")
    node = _stored(init)
    if node is None:
        return Unknown(f"Request.__init__ does not set self.{ATTRIBUTE} exactly once")
    kind = _wrapper(node.value)
    if kind is None:
        return Unknown(f"{REQUEST}:{node.lineno} stores {ast.unparse(node.value)!r}, a shape not seen")
    return Reading(kind, REQUEST, node.lineno)
