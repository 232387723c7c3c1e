"""How a hidden-states KV connector module reads the KV cache (S7), for vLLM's own and third-party ones.

A connector module either defines its own ``extract_from_kv_cache`` (which
axis of the per-layer KV view it takes as the block size) and its own
``get_required_kvcache_layout``, or delegates both to vLLM's
``ExampleHiddenStatesConnector``.  A module that copies vLLM's pre-0.29 code
(hs-connectors 0.7.0, ModelOpt's RDMA connector, TorchSpec's Mooncake one)
reads the wrong slots on vLLM >= 0.29, silently; these readers let the plan
compare the two.  Any shape not seen in a release is ``unknown``.
"""

from __future__ import annotations

import ast
import functools

from compat import astkit
from compat.astkit import Reader
from compat.probes.base import OpenValues, Reading, Unknown, matching, missing_file, probe
from compat.sources import Source
from .method import method_absent  # the S1 reading decides whether a missing module is a refactor

#: Lines the kit inserts into a file are fenced by these markers; serve probes read the file without them,
#: so a probe keeps saying what the release shipped after ``compat apply`` (no apply/remove flip-flop).
KIT_BEGIN = "# >>> specdec-compat"
KIT_END = "# <<< specdec-compat"

#: vLLM's built-in connector module (the one a ``kv_connector`` name without a module path loads)
VLLM_CONNECTOR = "vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py"
VLLM_CONNECTOR_MODULE = "vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector"
VLLM_CONNECTOR_CLASS = "ExampleHiddenStatesConnector"
#: hs-connectors' out-of-tree connectors (``kv_connector_module_path`` of its backends)
HS_MOONCAKE = "hs_connectors/mooncake_hidden_states_connector.py"
HS_FP8 = "hs_connectors/fp8_hidden_states_connector.py"
DELEGATES = "vllm"  # the value for "uses vLLM's own function / layout"
#: :func:`index_axis`: the axis read (``flatten(...)`` of literal arguments, ``shape[K]``), or vLLM's own function
INDEX_AXIS = matching("a KV axis read as flatten(...) or shape[K]", r"flatten\(.*\)|shape\[\d+\]", (DELEGATES,))
#: :func:`required_layout`: the literal layout the connector returns, or vLLM's own
KV_LAYOUT = OpenValues("a KV layout name returned as a literal", lambda value: isinstance(value, str), (DELEGATES,))


class _Pristine(Source):
    """A source with the kit's fenced insertions taken out again."""

    def __init__(self, inner: Source):
        super().__init__(*(getattr(inner, a, None) for a in ("kind", "location", "dist_name", "version", "metadata")))
        self.environ = getattr(inner, "environ", None)
        self._inner = inner

    def read(self, relpath: str) -> str | None:
        text = self._inner.read(relpath)
        return text if text is None else strip_fences(text)

    def names(self, prefix: str, suffix: str) -> list[str]:
        return self._inner.names(prefix, suffix)


def strip_fences(text: str) -> str:
    """``text`` without the kit's fenced insertions: the file as upstream shipped it."""
    if KIT_BEGIN not in text:
        return text
    kept, fenced = [], False
    for line in text.splitlines(keepends=True):
        if line.strip().startswith(KIT_BEGIN):
            fenced = True
        elif line.strip().startswith(KIT_END):
            fenced = False
        elif not fenced:
            kept.append(line)
    return "".join(kept)


def pristine(reader: Reader) -> Reader:
    """``reader``'s files as upstream shipped them (the kit's fenced insertions removed)."""
    if isinstance(reader.source, _Pristine):
        return reader
    return Reader(_Pristine(reader.source), reader.environ)


def serve_probe(name: str, package: str = "vllm", *, values=None):
    """Register a serve-path probe that reads the pristine files (see :data:`KIT_BEGIN`); ``values`` as for
    :func:`compat.probes.base.probe`."""

    def register(fn):
        @functools.wraps(fn)
        def on_pristine(reader: Reader):
            return fn(pristine(reader))

        probe(name, package, values=values)(on_pristine)
        return fn

    return register


def _extract_axis(fn: ast.FunctionDef) -> str | None:
    """flatten(0,1) / shape[K] of ``fn``'s first argument, when exactly one such read decides the block index."""
    if not fn.args.args:
        return None
    cache = fn.args.args[0].arg
    found = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "flatten":
            if astkit.dotted_name(node.func.value) == cache:
                try:
                    found.add(f"flatten{tuple(astkit.literal(a) for a in node.args)}".replace(" ", ""))
                except astkit.NotLiteral:
                    return None
        if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "shape"
                and astkit.dotted_name(node.value.value) == cache):
            if not (isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int)):
                return None
            found.add(f"shape[{node.slice.value}]")
    return found.pop() if len(found) == 1 else None


def _imports_from_vllm_connector(tree: ast.Module, name: str) -> bool:
    imported = astkit.imports_name(tree, name)
    return imported is not None and imported.module == VLLM_CONNECTOR_MODULE


def _subclasses_vllm_connector(tree: ast.Module) -> bool:
    return any(
        isinstance(node, ast.ClassDef)
        and any((astkit.dotted_name(b) or "").split(".")[-1] == VLLM_CONNECTOR_CLASS for b in node.bases)
        for node in tree.body
    )


def index_axis(reader: Reader, relpath: str):
    """The KV axis ``relpath``'s ``extract_from_kv_cache`` takes as block size, ``vllm`` if it uses vLLM's; or Unknown."""
    tree = reader.module(relpath)
    if tree is None:
        return Unknown(f"{relpath} not found")
    fn = astkit.find_function(tree, "extract_from_kv_cache")
    if fn is not None:
        axis = _extract_axis(fn)
        return Reading(axis, relpath, fn.lineno) if axis else Unknown(
            f"{relpath}:{fn.lineno} extract_from_kv_cache indexes the cache in a way not seen in a release")
    if _imports_from_vllm_connector(tree, "extract_from_kv_cache"):
        return Reading(DELEGATES, relpath, astkit.imports_name(tree, "extract_from_kv_cache").lineno)
    if _subclasses_vllm_connector(tree) and "extract_from_kv_cache" not in reader.text(relpath):
        return Reading(DELEGATES, relpath, None)
    return Unknown(f"{relpath} neither defines nor imports extract_from_kv_cache")


def _layout_returns(fn: ast.FunctionDef) -> set:
    """Literal strings ``fn`` returns, 'vllm' for a return of vLLM's connector's method; None on another return."""
    found = set()
    for node in ast.walk(fn):
        if not isinstance(node, ast.Return) or node.value is None:
            continue
        value = node.value
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            found.add(value.value)
        elif (isinstance(value, ast.Call)
              and (astkit.dotted_name(value.func) or "").endswith(f"{VLLM_CONNECTOR_CLASS}.get_required_kvcache_layout")):
            found.add(DELEGATES)
        else:
            return None
    return found


def required_layout(reader: Reader, relpath: str):
    """The KV layout the connector class(es) of ``relpath`` ask vLLM for (``NHD``, ``LBNHC``, ``vllm``); or Unknown."""
    tree = reader.module(relpath)
    if tree is None:
        return Unknown(f"{relpath} not found")
    values, line = set(), None
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        fn = astkit.find_function(node, "get_required_kvcache_layout")
        if fn is None:
            continue
        returned = _layout_returns(fn)
        if not returned:
            return Unknown(f"{relpath}:{fn.lineno} get_required_kvcache_layout returns a computed value")
        values |= returned
        line = line or fn.lineno
    if not values and _subclasses_vllm_connector(tree):
        return Reading(DELEGATES, relpath, None)
    if len(values) != 1:
        return Unknown(f"{relpath}: no single required KV layout ({sorted(values) or 'none'})")
    return Reading(values.pop(), relpath, line)


@serve_probe("serve.connector.index_axis", values=INDEX_AXIS.also("absent"))
def vllm_connector_index_axis(reader: Reader):
    """ExampleHiddenStatesConnector's extract_from_kv_cache block axis: flatten(0,1) / shape[1] (0.22) / shape[2] (0.29)."""
    return _or_absent(reader, index_axis)


@serve_probe("serve.connector.kv_layout", values=KV_LAYOUT.also("absent"))
def vllm_connector_kv_layout(reader: Reader):
    """KV layout ExampleHiddenStatesConnector requires: NHD / LBNHC (0.29)."""
    return _or_absent(reader, required_layout)


def _or_absent(reader: Reader, read):
    """``read`` on vLLM's connector, or ``absent`` where the release has no extract_hidden_states at all."""
    if reader.module(VLLM_CONNECTOR) is not None:
        return read(reader, VLLM_CONNECTOR)

    return method_absent(reader, f"{VLLM_CONNECTOR} not found")


@serve_probe("serve.hs_connectors.mooncake.index_axis", package="hs_connectors", values=INDEX_AXIS)
def hs_mooncake_index_axis(reader: Reader):
    """hs-connectors' Mooncake connector block axis: shape[1] (own copy, 0.7.0) / vllm (delegates, 0.8.0+)."""
    return index_axis(reader, HS_MOONCAKE)


@serve_probe("serve.hs_connectors.mooncake.kv_layout", package="hs_connectors", values=KV_LAYOUT)
def hs_mooncake_kv_layout(reader: Reader):
    """hs-connectors' Mooncake connector KV layout: NHD (0.7.0) / vllm (asks vLLM's connector, 0.8.0+)."""
    return required_layout(reader, HS_MOONCAKE)


@serve_probe("serve.hs_connectors.mooncake.host_copy", package="hs_connectors",
             values=("accelerator-module", "pinned-empty-like"))
def hs_mooncake_host_copy(reader: Reader):
    """How hs-connectors' Mooncake connector copies a sample to host: pinned-empty-like (0.7.0: torch.empty_like(...,
    pin_memory=True) on torch.cuda streams, which a CPU build cannot allocate) / accelerator-module (0.8.0+: streams
    from hs_connectors.device, which raises without an accelerator)."""
    tree = reader.module(HS_MOONCAKE)
    if tree is None:
        return Unknown(f"{HS_MOONCAKE} not found")
    if astkit.imports_name(tree, "accelerator_module") is not None:
        return Reading("accelerator-module", HS_MOONCAKE, astkit.imports_name(tree, "accelerator_module").lineno)
    pinned = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and (astkit.dotted_name(n.func) or "") ==
              "torch.empty_like" and any(k.arg == "pin_memory" and isinstance(k.value, ast.Constant)
                                         and k.value.value is True for k in n.keywords)]
    if len(pinned) == 1:
        return Reading("pinned-empty-like", HS_MOONCAKE, pinned[0].lineno)
    return Unknown(f"{HS_MOONCAKE}: {len(pinned)} pinned empty_like calls and no accelerator_module, a shape not seen")


@serve_probe("serve.hs_connectors.fp8", package="hs_connectors", values=("absent", "overrides-write-tensors"))
def hs_fp8_connector(reader: Reader):
    """hs-connectors' FP8 connector: absent (< 0.9.0) / overrides-write-tensors (vLLM's private _write_tensors)."""
    tree = reader.module(HS_FP8)
    if tree is None:
        return missing_file(reader, HS_FP8, HS_MOONCAKE, "hs-connectors")
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and astkit.find_function(node, "_write_tensors") is not None:
            return Reading("overrides-write-tensors", HS_FP8, node.lineno)
    return Unknown(f"{HS_FP8} has no connector class overriding _write_tensors")


def module_relpath(dotted: str) -> str:
    """``a.b.c`` -> ``a/b/c.py`` (a ``kv_connector_module_path`` as a file of its distribution)."""
    return dotted.replace(".", "/") + ".py"
