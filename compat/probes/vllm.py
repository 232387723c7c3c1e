"""Probes of vLLM's V1 internals that speculators' generator drives directly.

Each probe names the contract a user would search for and returns a small
value (``absent``/``optional``/``required``, ``list``/``single``...).  Lookups
follow base classes, mixins and re-exports inside vLLM; a probe that cannot
find the code it needs, or meets code it cannot read exactly (a base outside
vLLM, ``**kwargs`` passed elsewhere, a computed default, a signature-changing
decorator), returns :class:`Unknown`, never a guess.
"""

from __future__ import annotations

import ast
import itertools

from .. import astkit
from ..astkit import NotLiteral, Reader
from .base import ARGUMENT_KINDS, MODULE_PATH, OpenValues, Reading, Unknown, matching, module_path, probe

REQUEST = "vllm/v1/request.py"
SCHEDULER = "vllm/v1/core/sched/scheduler.py"
CONFIG_FILES = ("vllm/config/__init__.py", "vllm/config.py")
SCHEDULER_CONFIG = ("vllm/config/scheduler.py", *CONFIG_FILES)
CACHE_CONFIG = ("vllm/config/cache.py", *CONFIG_FILES)
KV_UTILS = "vllm/v1/core/kv_cache_utils.py"
KV_PLANNING = "vllm/v1/core/kv_cache_planning.py"
ENGINE_CORE = "vllm/v1/engine/core.py"
EXECUTOR = "vllm/v1/executor/multiproc_executor.py"
GPU_RUNNER = "vllm/v1/worker/gpu_model_runner.py"
HASH_FILES = ("vllm/utils/hashing.py", "vllm/utils/__init__.py", "vllm/utils.py", KV_UTILS)
LLAMA = "vllm/model_executor/models/llama.py"
INTERFACES = "vllm/model_executor/models/interfaces.py"
KV_FUNCTIONS = ("get_kv_cache_config", "get_kv_cache_configs", "get_kv_cache_config_from_groups")
#: where the KV planning functions live or are imported from by their caller
KV_LOOKUP = (KV_PLANNING, KV_UTILS, ENGINE_CORE)
#: the embedding methods LlamaModel may have, newest first (``model.input_embeddings``)
EMBEDDINGS = ("embed_input_ids", "get_input_embeddings")
#: SupportsEagle3's default-layer getter, newest name first (``model.eagle3_aux_layers``)
EAGLE3_GETTERS = ("get_eagle3_default_aux_hidden_state_layers", "get_eagle3_aux_hidden_state_layers")

#: :func:`_field_default`: a literal default as the string itself, else its repr (``None``, ``True``), or absent
FIELD_DEFAULT = OpenValues("a field default's literal (a string as itself, else its repr)",
                           lambda value: isinstance(value, str), ("absent",))
#: the same, its None read as VllmConfig's auto-on
ASYNC_SCHEDULING_DEFAULT = OpenValues("a field default's literal other than None (a string as itself, else its repr)",
                                      lambda value: isinstance(value, str) and value != "None",
                                      ("absent", "None->auto-on"))
#: ``kv_cache.functions``: the KV planning functions that exist, joined in KV_FUNCTIONS' order (never none)
KV_FUNCTION_SETS = tuple(",".join(names) for size in range(1, len(KV_FUNCTIONS) + 1)
                         for names in itertools.combinations(KV_FUNCTIONS, size))
#: ``kv_cache.module``: where the planning functions are found (a home the lookup followed), and whether
#: kv_cache_utils re-exports them from there
KV_MODULE = matching("a dotted module path, with ' (re-exported)' where kv_cache_utils re-exports from it",
                     MODULE_PATH + r"( \(re-exported\))?")


def _module_name(relpath: str) -> str:
    mod = relpath[: -len(".py")].replace("/", ".")
    return mod[: -len(".__init__")] if mod.endswith(".__init__") else mod


def _as_tuple(files):
    return (files,) if isinstance(files, str) else tuple(files)


# -- classes -----------------------------------------------------------------------


def _chain(reader: Reader, files, cls_name: str):
    """The class (with its readable bases) from the first file that defines or re-exports it."""
    for relpath in _as_tuple(files):
        if reader.module(relpath) is None:
            continue
        chain = astkit.class_chain(reader, relpath, cls_name)
        if chain is not None:
            return chain
    return Unknown(f"class {cls_name} not found in {', '.join(_as_tuple(files))}")


def _member(reader: Reader, files, cls_name: str, name: str, kind: str):
    """(relpath, node) of ``cls_name.name`` (``kind``: "method" or "annotated", a ClassChain lookup),
    searching bases; None if certainly absent; or Unknown when an unread base may define it."""
    chain = _chain(reader, files, cls_name)
    if isinstance(chain, Unknown):
        return chain
    hit = getattr(chain, kind)(name)
    if hit is not None:
        return hit[0], hit[2]
    if not chain.complete:
        return Unknown(f"{cls_name}.{name} not found; it may come from {', '.join(chain.unread)}")
    return None


def _method(reader: Reader, files, cls_name: str, method: str):
    """(relpath, function) of ``cls_name.method``; None if certainly absent; or Unknown."""
    return _member(reader, files, cls_name, method, "method")


def _owner_line(reader: Reader, files, cls_name: str):
    chain = _chain(reader, files, cls_name)
    return (None, None) if isinstance(chain, Unknown) else (chain.classes[0][0], chain.classes[0][1].lineno)


def _parameter(chain, cls_name: str, method: str, arg: str):
    """(kind, relpath, function, forwarders) for ``cls_name.method(arg=)``, following ``**kwargs``
    passed to ``super().method``; or Unknown.  ``function`` is the one whose signature decided,
    ``forwarders`` the overrides on the way that handed their ``**kwargs`` on."""
    after, forwarders = None, []
    while True:
        hit = chain.method(method, after=after)
        if hit is None:
            if not chain.complete:
                return Unknown(f"{cls_name}.{method} not found; it may come from {', '.join(chain.unread)}")
            return Unknown(f"{cls_name}.{method} not found (a generated method is not read)")
        relpath, owner, fn = hit
        opaque = astkit.opaque_decorators(fn)
        if opaque:
            return Unknown(f"{owner.name}.{method} is decorated with {', '.join(opaque)}, which may change its signature")
        kind = astkit.argument_kind(fn, arg)
        if kind != "absent" or fn.args.kwarg is None:
            return kind, relpath, fn, forwarders
        if not astkit.forwards_kwargs_to_super(fn):
            return Unknown(f"{owner.name}.{method} takes **{fn.args.kwarg.arg}; {arg}= may be accepted there")
        forwarders.append(fn)
        after = owner  # **kwargs go on to the next definition in the chain


def _init_argument(reader: Reader, files, cls_name: str, arg: str):
    """absent / optional / required for ``cls_name(arg=)``, following ``**kwargs`` to the base."""
    chain = _chain(reader, files, cls_name)
    if isinstance(chain, Unknown):
        return chain
    found = _parameter(chain, cls_name, "__init__", arg)
    if isinstance(found, Unknown):
        return found
    kind, relpath, fn, _forwarders = found
    return Reading(kind, relpath, fn.lineno)


def _field(reader: Reader, files, cls_name: str, name: str):
    """(relpath, AnnAssign) of a dataclass field, searching bases; None if certainly absent; or Unknown."""
    return _member(reader, files, cls_name, name, "annotated")


def _field_default(reader: Reader, files, cls_name: str, name: str):
    """The literal default of a dataclass field as a string ('None', 'True'...), 'absent', or Unknown."""
    hit = _field(reader, files, cls_name, name)
    if isinstance(hit, Unknown):
        return hit
    if hit is None:
        relpath, line = _owner_line(reader, files, cls_name)
        return Reading("absent", relpath, line)
    relpath, node = hit
    expr = astkit.field_default(node)
    if expr is None:
        return Unknown(f"{cls_name}.{name} has no default")
    try:
        value = astkit.literal(expr)
    except NotLiteral as exc:
        return Unknown(f"{cls_name}.{name} default is computed ({exc})")
    return Reading(value if isinstance(value, str) else repr(value), relpath, node.lineno)


def _initvar_requirement(reader: Reader, name: str):
    hit = _field(reader, SCHEDULER_CONFIG, "SchedulerConfig", name)
    if isinstance(hit, Unknown):
        return hit
    if hit is None:
        relpath, line = _owner_line(reader, SCHEDULER_CONFIG, "SchedulerConfig")
        return Reading("absent", relpath, line)
    relpath, node = hit
    # ``x: InitVar[int]`` or a field without default is required
    return Reading("required" if node.value is None else "optional", relpath, node.lineno)


# -- Request ---------------------------------------------------------------


@probe("request.block_hasher", values=ARGUMENT_KINDS)
def request_block_hasher(reader: Reader):
    """Request.__init__(block_hasher=): absent / optional / required."""
    return _init_argument(reader, REQUEST, "Request", "block_hasher")


@probe("request.eos_token_id", values=ARGUMENT_KINDS)
def request_eos_token_id(reader: Reader):
    """Request.__init__(eos_token_id=): gone in 0.17.0 (EOS moved to SamplingParams)."""
    return _init_argument(reader, REQUEST, "Request", "eos_token_id")


@probe("request.structured_output_request", values=ARGUMENT_KINDS)
def request_structured_output_request(reader: Reader):
    """Request.__init__(structured_output_request=): gone in 0.11.1."""
    return _init_argument(reader, REQUEST, "Request", "structured_output_request")


@probe("request.pooling_params", values=ARGUMENT_KINDS)
def request_pooling_params(reader: Reader):
    """Request.__init__(pooling_params=): required or optional."""
    return _init_argument(reader, REQUEST, "Request", "pooling_params")


# -- Scheduler ---------------------------------------------------------------


@probe("scheduler.block_size", values=ARGUMENT_KINDS)
def scheduler_block_size(reader: Reader):
    """Scheduler.__init__(block_size=): required since 0.11.1."""
    return _init_argument(reader, SCHEDULER, "Scheduler", "block_size")


@probe("scheduler.hash_block_size", values=ARGUMENT_KINDS)
def scheduler_hash_block_size(reader: Reader):
    """Scheduler.__init__(hash_block_size=): added in 0.20.0."""
    return _init_argument(reader, SCHEDULER, "Scheduler", "hash_block_size")


#: the SchedulerConfig flag (renamed in 0.12) that the waiting loop tests before giving up on a long prompt
CHUNKED_FLAGS = ("chunked_prefill_enabled", "enable_chunked_prefill")


def _tests_chunked_prefill_off(test: ast.AST) -> bool:
    """``not <...>.chunked_prefill_enabled`` (or enable_chunked_prefill), alone or in an ``and``."""
    parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    return any(isinstance(part, ast.UnaryOp) and isinstance(part.op, ast.Not)
               and isinstance(part.operand, ast.Attribute) and part.operand.attr in CHUNKED_FLAGS
               for part in parts)


@probe("scheduler.prompt_over_budget_without_chunking", values=("skipped", "stops"))
def scheduler_prompt_over_budget(reader: Reader):
    """A waiting prompt larger than the step's token budget, chunking off: skipped (0.11) or stops the step (0.12+)."""
    found = _method(reader, SCHEDULER, "Scheduler", "schedule")
    if isinstance(found, Unknown):
        return found
    if found is None:
        return Unknown("Scheduler.schedule not found")
    relpath, fn = found
    verdicts = set()
    line = None
    for node in ast.walk(fn):
        if isinstance(node, ast.If) and _tests_chunked_prefill_off(node.test) and node.body:
            last = node.body[-1]
            if isinstance(last, ast.Continue):
                verdicts.add("skipped")
            elif isinstance(last, ast.Break):
                verdicts.add("stops")
            else:
                verdicts.add("other")
            line = node.lineno
    if len(verdicts) != 1 or "other" in verdicts:
        return Unknown("Scheduler.schedule decides an over-budget prompt without chunking in code this probe "
                       f"cannot read exactly ({', '.join(sorted(verdicts)) or 'no such branch'})")
    return Reading(verdicts.pop(), relpath, line)


@probe("scheduler_config.max_model_len", values=ARGUMENT_KINDS)
def scheduler_config_max_model_len(reader: Reader):
    """SchedulerConfig max_model_len: required InitVar since 0.12.0."""
    return _initvar_requirement(reader, "max_model_len")


@probe("scheduler_config.is_encoder_decoder", values=ARGUMENT_KINDS)
def scheduler_config_is_encoder_decoder(reader: Reader):
    """SchedulerConfig is_encoder_decoder: required InitVar since 0.12.0."""
    return _initvar_requirement(reader, "is_encoder_decoder")


@probe("scheduler_config.async_scheduling_default", values=ASYNC_SCHEDULING_DEFAULT)
def scheduler_config_async_scheduling(reader: Reader):
    """SchedulerConfig.async_scheduling default: absent / False / None->auto-on."""
    result = _field_default(reader, SCHEDULER_CONFIG, "SchedulerConfig", "async_scheduling")
    if isinstance(result, Reading) and result.value == "None":
        return Reading("None->auto-on", result.file, result.line)
    return result


@probe("scheduler_config.chunked_prefill_default", values=FIELD_DEFAULT)
def scheduler_config_chunked_prefill(reader: Reader):
    """SchedulerConfig.enable_chunked_prefill default: None (off when built directly, <= 0.11.0) / True (0.11.1+)."""
    return _field_default(reader, SCHEDULER_CONFIG, "SchedulerConfig", "enable_chunked_prefill")


@probe("cache_config.enable_prefix_caching_default", values=FIELD_DEFAULT)
def cache_config_prefix_caching(reader: Reader):
    """CacheConfig.enable_prefix_caching default (True from 0.12.0)."""
    return _field_default(reader, CACHE_CONFIG, "CacheConfig", "enable_prefix_caching")


@probe("cache_config.kv_cache_layout_resolution", values=("none", "required"))
def cache_config_kv_cache_layout(reader: Reader):
    """Must the KV cache layout be resolved before initialize_from_config? none / required."""
    found = _method(reader, CACHE_CONFIG, "CacheConfig", "get_resolved_kv_cache_layout")
    if isinstance(found, Unknown):
        return found
    if found is not None:
        return Reading("required", *found[0:1], found[1].lineno)
    # No resolver on CacheConfig: "none" only if nothing of the resolution scheme is left either.
    layout = _field(reader, CACHE_CONFIG, "CacheConfig", "kv_cache_layout")
    if isinstance(layout, Unknown):
        return layout
    if layout is not None:
        return Unknown("CacheConfig has a kv_cache_layout field but no get_resolved_kv_cache_layout; the resolver moved")
    for relpath in KV_LOOKUP:
        tree = reader.module(relpath)
        if tree is not None and _mentions(tree, ("get_resolved_kv_cache_layout", "resolve_kv_cache_layout")):
            return Unknown(f"{relpath} resolves the KV cache layout, but not through CacheConfig")
    relpath, line = _owner_line(reader, CACHE_CONFIG, "CacheConfig")
    return Reading("none", relpath, line)


def _mentions(tree: ast.AST, names) -> bool:
    """Is any of ``names`` used as a name, attribute or imported name in ``tree``?"""
    return not astkit.names_used(tree).isdisjoint(names)


# -- KV cache config API -------------------------------------------------------


def _kv_definitions(reader: Reader):
    """name -> (relpath, FunctionDef) of the KV planning functions that exist, or Unknown.

    Looks where they live or are re-exported (kv_cache_planning, kv_cache_utils) and
    where the engine core imports them from, so a move to a third module is followed.
    """
    if reader.module(KV_UTILS) is None:
        return Unknown(f"{KV_UTILS} not found")
    lookup, found = list(KV_LOOKUP), {}
    while True:  # a module found to hold one of them is searched for the others too
        for name in KV_FUNCTIONS:
            for relpath in lookup:
                hit = reader.module(relpath) is not None and astkit.resolve_name(reader, relpath, name)
                if hit and isinstance(hit[1], (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found.setdefault(name, hit)
                    break
        homes = [p for p, _fn in found.values() if p not in lookup]
        if not homes:
            break
        lookup += homes
    missing = [n for n in KV_FUNCTIONS if n not in found]
    unresolved = [n for n in missing if any(reader.module(p) is not None and _mentions(reader.module(p), (n,)) for p in lookup)]
    if unresolved:
        return Unknown(f"{', '.join(unresolved)} used but its definition was not found")
    if not found:
        return Unknown("no KV planning function found (moved out of kv_cache_utils?)")
    return found


@probe("kv_cache.functions", values=KV_FUNCTION_SETS)
def kv_cache_functions(reader: Reader):
    """Which of get_kv_cache_config / _configs / _config_from_groups exist."""
    found = _kv_definitions(reader)
    if isinstance(found, Unknown):
        return found
    homes = {relpath for relpath, _fn in found.values()}
    return Reading(",".join(n for n in KV_FUNCTIONS if n in found), min(homes), None)


@probe("kv_cache.module", values=KV_MODULE)
def kv_cache_module(reader: Reader):
    """Module defining the KV planning functions, and whether kv_cache_utils re-exports them."""
    found = _kv_definitions(reader)
    if isinstance(found, Unknown):
        return found
    homes = {relpath for relpath, _fn in found.values()}
    if len(homes) != 1:
        return Unknown(f"KV planning functions are split over {', '.join(sorted(homes))}")
    (relpath,) = homes
    module = _module_name(relpath)
    if relpath != KV_UTILS:
        utils = reader.module(KV_UTILS)
        exported = any(astkit.imports_name(utils, n) for n in found)
        return Reading(module + (" (re-exported)" if exported else ""), relpath, None)
    return Reading(module, relpath, None)


def _kv_function_argument(reader: Reader, function: str, arg: str):
    found = _kv_definitions(reader)
    if isinstance(found, Unknown):
        return found
    if function not in found:
        return Reading("no-function", min(p for p, _ in found.values()), None)
    relpath, fn = found[function]
    opaque = astkit.opaque_decorators(fn)
    if opaque:
        return Unknown(f"{function} is decorated with {', '.join(opaque)}, which may change its signature")
    if astkit.argument_kind(fn, arg) == "absent" and fn.args.kwarg is not None:
        return Unknown(f"{function} takes **{fn.args.kwarg.arg}; {arg}= may be accepted there")
    return Reading(astkit.argument_kind(fn, arg), relpath, fn.lineno)


@probe("kv_cache.from_groups.kv_cache_specs", values=("no-function", *ARGUMENT_KINDS))
def kv_cache_from_groups_specs(reader: Reader):
    """get_kv_cache_config_from_groups(kv_cache_specs=): required until 0.12.0, then absent."""
    return _kv_function_argument(reader, "get_kv_cache_config_from_groups", "kv_cache_specs")


@probe("kv_cache.configs.global_kv_cache_groups", values=("no-function", *ARGUMENT_KINDS))
def kv_cache_configs_global_groups(reader: Reader):
    """get_kv_cache_configs(global_kv_cache_groups=): required from 0.33.0."""
    return _kv_function_argument(reader, "get_kv_cache_configs", "global_kv_cache_groups")


@probe("kv_cache.block_hasher_first_param", values=matching("a parameter name", r"[A-Za-z_]\w*", ("absent",)))
def kv_cache_block_hasher_param(reader: Reader):
    """Name of get_request_block_hasher's first parameter (renamed hash_block_size in 0.24)."""
    if reader.module(KV_UTILS) is None:
        return Unknown(f"{KV_UTILS} not found")
    for relpath in (KV_UTILS, KV_PLANNING, ENGINE_CORE):
        hit = reader.module(relpath) is not None and astkit.resolve_name(reader, relpath, "get_request_block_hasher")
        if hit and isinstance(hit[1], (ast.FunctionDef, ast.AsyncFunctionDef)):
            fn = hit[1]
            opaque = astkit.opaque_decorators(fn)
            if opaque:
                return Unknown(f"get_request_block_hasher is decorated with {', '.join(opaque)}")
            names = astkit.parameter_names(fn)
            if not names:
                return Unknown("get_request_block_hasher takes no named parameter")
            return Reading(names[0], hit[0], fn.lineno)
    if any(reader.module(p) is not None and _mentions(reader.module(p), ("get_request_block_hasher",)) for p in KV_LOOKUP):
        return Unknown("get_request_block_hasher is used but its definition was not found")
    return Reading("absent", KV_UTILS, None)


@probe("hashing.get_hash_fn_by_name", values=module_path(("absent",)))
def hashing_module(reader: Reader):
    """Module that defines get_hash_fn_by_name (vllm.utils.hashing since 0.11.1)."""
    seen = [p for p in HASH_FILES if reader.module(p) is not None]
    if not seen:
        return Unknown("no vllm utils module found")
    for relpath in seen:
        tree = reader.module(relpath)
        node = astkit.defines(tree, "get_hash_fn_by_name")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return Reading(_module_name(relpath), relpath, node.lineno)
    for relpath in (*seen, ENGINE_CORE):  # moved: follow a re-export or the caller's import
        hit = reader.module(relpath) is not None and astkit.resolve_name(reader, relpath, "get_hash_fn_by_name")
        if hit and isinstance(hit[1], (ast.FunctionDef, ast.AsyncFunctionDef)):
            return Reading(_module_name(hit[0]), hit[0], hit[1].lineno)
    if any(_mentions(reader.module(p), ("get_hash_fn_by_name",)) for p in seen):
        return Unknown("get_hash_fn_by_name is used but its definition was not found")
    return Reading("absent", None, None)


# -- executor / runner ---------------------------------------------------------


def _returns_first_when_unique(fn: ast.AST) -> bool:
    """``responses[0] if output_rank is not None else responses`` or an equivalent branch."""
    for node in ast.walk(fn):
        if isinstance(node, ast.IfExp) and _is_first_item(node.body) and _mentions_rank(node.test):
            return True
        if isinstance(node, ast.If) and _mentions_rank(node.test):
            for inner in node.body:
                if isinstance(inner, ast.Return) and _is_first_item(inner.value):
                    return True
    return False


def _is_first_item(node) -> bool:
    return (
        isinstance(node, ast.Subscript)
        and isinstance(node.slice, ast.Constant)
        and node.slice.value == 0
    )


def _mentions_rank(node) -> bool:
    return any(isinstance(n, ast.Name) and ("rank" in n.id) for n in ast.walk(node))


def _own_returns(fn: ast.AST):
    """Return statements of ``fn`` itself (not of nested functions or lambdas)."""
    stack = list(getattr(fn, "body", []))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return):
            yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        stack.extend(ast.iter_child_nodes(node))


def _returns_super_call(fn: ast.AST) -> bool:
    """Every own ``return`` hands back ``super().<name>(...)`` unchanged."""
    returns = list(_own_returns(fn))
    return bool(returns) and all(
        isinstance(r.value, ast.Call)
        and isinstance(r.value.func, ast.Attribute)
        and isinstance(r.value.func.value, ast.Call)
        and astkit.dotted_name(r.value.func.value.func) == "super"
        for r in returns
    )


def _returns_plain_list(fn: ast.AST) -> bool:
    """Every own ``return`` gives back a local list built in ``fn`` (``responses = []``)."""
    lists = {
        t.id
        for node in ast.walk(fn)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.List)
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    returns = list(_own_returns(fn))
    return bool(returns) and all(isinstance(r.value, ast.Name) and r.value.id in lists for r in returns)


def _called_helpers(reader: Reader, relpath: str, chain, fn: ast.AST):
    """Functions of this module, or methods of the class chain, that ``fn`` calls."""
    tree = reader.module(relpath)
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call):
            continue
        name = astkit.dotted_name(node.func)
        if name and "." not in name and tree is not None:
            hit = astkit.resolve_name(reader, relpath, name)
            if hit and isinstance(hit[1], (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield hit[1]
        elif name and name.startswith("self.") and name.count(".") == 1:
            hit = chain.method(name.split(".", 1)[1])
            if hit:
                yield hit[2]


@probe("executor.collective_rpc.unique_reply_rank", values=("absent", "list", "single"))
def executor_unique_reply_rank(reader: Reader):
    """MultiprocExecutor.collective_rpc(unique_reply_rank=): absent / list / single."""
    chain = _chain(reader, EXECUTOR, "MultiprocExecutor")
    if isinstance(chain, Unknown):
        return chain
    found = _parameter(chain, "MultiprocExecutor", "collective_rpc", "unique_reply_rank")
    if isinstance(found, Unknown):
        return found
    kind, relpath, fn, forwarders = found
    if kind == "absent":
        return Reading("absent", relpath, fn.lineno)
    if not all(_returns_super_call(f) for f in forwarders):
        return Unknown("a collective_rpc override reshapes what the base returns")
    if _returns_first_when_unique(fn):
        return Reading("single", relpath, fn.lineno)
    if any(_returns_first_when_unique(h) for h in _called_helpers(reader, relpath, chain, fn)):
        return Reading("single", relpath, fn.lineno)
    if _returns_plain_list(fn):
        return Reading("list", relpath, fn.lineno)
    return Unknown("collective_rpc shapes its reply in code this probe cannot read exactly")


@probe("runner.sample_tokens_split", values=(False, True))
def runner_sample_tokens(reader: Reader):
    """Does GPUModelRunner split execute_model from sample_tokens (0.11.1+)?  Where V1 is removed (0.34) the runner
    the executor drives is Model Runner V2's (vllm/v1/worker/gpu/model_runner.py), read instead."""
    from .runner_v2 import RUNNER_V2, v1_removed

    runner = RUNNER_V2 if reader.module(GPU_RUNNER) is None and v1_removed(reader) else GPU_RUNNER
    found = _method(reader, runner, "GPUModelRunner", "sample_tokens")
    if isinstance(found, Unknown):
        return found
    if found is None:
        relpath, line = _owner_line(reader, runner, "GPUModelRunner")
        return Reading(False, relpath, line)
    return Reading(True, found[0], found[1].lineno)


# -- models ---------------------------------------------------------------------


@probe("model.input_embeddings", values=EMBEDDINGS)
def model_input_embeddings(reader: Reader):
    """LlamaModel embeds with embed_input_ids (0.11.1+) or get_input_embeddings."""
    for name in EMBEDDINGS:
        found = _method(reader, LLAMA, "LlamaModel", name)
        if isinstance(found, Unknown):
            return found
        if found is not None:
            return Reading(name, found[0], found[1].lineno)
    return Unknown("LlamaModel has neither embed_input_ids nor get_input_embeddings")


@probe("model.eagle3_aux_layers", values=("absent", *EAGLE3_GETTERS))
def model_eagle3_aux_layers(reader: Reader):
    """SupportsEagle3 default-layer getter name (renamed in 0.18.0)."""
    if reader.module(INTERFACES) is None:
        return Unknown(f"{INTERFACES} not found")
    chain = astkit.class_chain(reader, INTERFACES, "SupportsEagle3")
    if chain is None and reader.module(LLAMA) is not None:  # moved: follow the model's own import
        chain = astkit.class_chain(reader, LLAMA, "SupportsEagle3")
    if chain is None:
        if reader.module(LLAMA) is not None and _mentions(reader.module(LLAMA), ("SupportsEagle3",)):
            return Unknown("SupportsEagle3 is used by llama.py but its definition was not found")
        return Reading("absent", INTERFACES, None)
    for name in EAGLE3_GETTERS:
        hit = chain.method(name)
        if hit is not None:
            return Reading(name, hit[0], hit[2].lineno)
    if not chain.complete:
        return Unknown(f"SupportsEagle3's getter may come from {', '.join(chain.unread)}")
    return Unknown("SupportsEagle3 has no aux-layer getter")
