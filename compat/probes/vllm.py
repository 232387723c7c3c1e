"""Probes of vLLM's V1 internals that speculators' generator drives directly.

Each probe names the contract a user would search for and returns a small
value (``absent``/``optional``/``required``, ``list``/``single``...).  A probe
that cannot find the code it needs returns :class:`Unknown`, never a guess.
"""

from __future__ import annotations

import ast

from .. import astkit
from ..astkit import Reader
from .base import Reading, Unknown, probe

REQUEST = "vllm/v1/request.py"
SCHEDULER = "vllm/v1/core/sched/scheduler.py"
CONFIG_FILES = ("vllm/config/__init__.py", "vllm/config.py")
SCHEDULER_CONFIG = ("vllm/config/scheduler.py", *CONFIG_FILES)
CACHE_CONFIG = ("vllm/config/cache.py", *CONFIG_FILES)
VLLM_CONFIG = ("vllm/config/vllm.py", *CONFIG_FILES)
KV_UTILS = "vllm/v1/core/kv_cache_utils.py"
KV_PLANNING = "vllm/v1/core/kv_cache_planning.py"
EXECUTOR = "vllm/v1/executor/multiproc_executor.py"
GPU_RUNNER = "vllm/v1/worker/gpu_model_runner.py"
RUNNER_V2 = "vllm/v1/worker/gpu/model_runner.py"
HASH_FILES = ("vllm/utils/hashing.py", "vllm/utils/__init__.py", "vllm/utils.py", KV_UTILS)
LLAMA = "vllm/model_executor/models/llama.py"
INTERFACES = "vllm/model_executor/models/interfaces.py"
ENVS = "vllm/envs.py"
KV_FUNCTIONS = ("get_kv_cache_config", "get_kv_cache_configs", "get_kv_cache_config_from_groups")


def _module_name(relpath: str) -> str:
    mod = relpath[: -len(".py")].replace("/", ".")
    return mod[: -len(".__init__")] if mod.endswith(".__init__") else mod


# -- helpers ---------------------------------------------------------------


def _method(reader: Reader, files, cls_name: str, method: str):
    """(file, FunctionDef) of ``cls_name.method`` in the first file defining the class."""
    files = (files,) if isinstance(files, str) else files
    for relpath in files:
        tree = reader.module(relpath)
        if tree is None:
            continue
        cls = astkit.find_class(tree, cls_name)
        if cls is None:
            continue
        fn = astkit.find_function(cls, method)
        if fn is None:
            return relpath, cls, None
        return relpath, cls, fn
    return None, None, None


def _init_argument(reader: Reader, files, cls_name: str, arg: str):
    relpath, cls, fn = _method(reader, files, cls_name, "__init__")
    if cls is None:
        return Unknown(f"class {cls_name} not found in {', '.join(_as_tuple(files))}")
    if fn is None:
        return Unknown(f"{cls_name}.__init__ not found in {relpath}")
    return Reading(astkit.argument_kind(fn, arg), relpath, fn.lineno)


def _as_tuple(files):
    return (files,) if isinstance(files, str) else tuple(files)


def _dataclass_field(reader: Reader, files, cls_name: str):
    for relpath in _as_tuple(files):
        tree = reader.module(relpath)
        if tree is None:
            continue
        cls = astkit.find_class(tree, cls_name)
        if cls is not None:
            return relpath, cls
    return None, None


def _initvar_requirement(reader: Reader, name: str):
    relpath, cls = _dataclass_field(reader, SCHEDULER_CONFIG, "SchedulerConfig")
    if cls is None:
        return Unknown("class SchedulerConfig not found")
    field = astkit.class_field(cls, name)
    if field is None:
        return Reading("absent", relpath, cls.lineno)
    if field.value is None:
        # ``x: InitVar[int]`` or a required field without default
        return Reading("required", relpath, field.lineno)
    return Reading("optional", relpath, field.lineno)


# -- Request ---------------------------------------------------------------


@probe("request.block_hasher")
def request_block_hasher(reader: Reader):
    """Request.__init__(block_hasher=): absent / optional / required."""
    return _init_argument(reader, REQUEST, "Request", "block_hasher")


@probe("request.eos_token_id")
def request_eos_token_id(reader: Reader):
    """Request.__init__(eos_token_id=): gone in 0.17.0 (EOS moved to SamplingParams)."""
    return _init_argument(reader, REQUEST, "Request", "eos_token_id")


@probe("request.structured_output_request")
def request_structured_output_request(reader: Reader):
    """Request.__init__(structured_output_request=): gone in 0.11.1."""
    return _init_argument(reader, REQUEST, "Request", "structured_output_request")


@probe("request.pooling_params")
def request_pooling_params(reader: Reader):
    """Request.__init__(pooling_params=): required or optional."""
    return _init_argument(reader, REQUEST, "Request", "pooling_params")


# -- Scheduler ---------------------------------------------------------------


@probe("scheduler.block_size")
def scheduler_block_size(reader: Reader):
    """Scheduler.__init__(block_size=): required since 0.11.1."""
    return _init_argument(reader, SCHEDULER, "Scheduler", "block_size")


@probe("scheduler.hash_block_size")
def scheduler_hash_block_size(reader: Reader):
    """Scheduler.__init__(hash_block_size=): added in 0.20.0."""
    return _init_argument(reader, SCHEDULER, "Scheduler", "hash_block_size")


@probe("scheduler_config.max_model_len")
def scheduler_config_max_model_len(reader: Reader):
    """SchedulerConfig max_model_len: required InitVar since 0.12.0."""
    return _initvar_requirement(reader, "max_model_len")


@probe("scheduler_config.is_encoder_decoder")
def scheduler_config_is_encoder_decoder(reader: Reader):
    """SchedulerConfig is_encoder_decoder: required InitVar since 0.12.0."""
    return _initvar_requirement(reader, "is_encoder_decoder")


@probe("scheduler_config.async_scheduling_default")
def scheduler_config_async_scheduling(reader: Reader):
    """SchedulerConfig.async_scheduling default: absent / False / None->auto-on."""
    relpath, cls = _dataclass_field(reader, SCHEDULER_CONFIG, "SchedulerConfig")
    if cls is None:
        return Unknown("class SchedulerConfig not found")
    field = astkit.class_field(cls, "async_scheduling")
    if field is None:
        return Reading("absent", relpath, cls.lineno)
    default = astkit.literal(astkit.field_default(field))
    if default is None:
        return Reading("None->auto-on", relpath, field.lineno)
    return Reading(repr(default) if not isinstance(default, str) else default, relpath, field.lineno)


@probe("cache_config.enable_prefix_caching_default")
def cache_config_prefix_caching(reader: Reader):
    """CacheConfig.enable_prefix_caching default (True from 0.12.0)."""
    relpath, cls = _dataclass_field(reader, CACHE_CONFIG, "CacheConfig")
    if cls is None:
        return Unknown("class CacheConfig not found")
    field = astkit.class_field(cls, "enable_prefix_caching")
    if field is None:
        return Reading("absent", relpath, cls.lineno)
    default = astkit.literal(astkit.field_default(field))
    return Reading(repr(default) if not isinstance(default, str) else default, relpath, field.lineno)


@probe("cache_config.kv_cache_layout_resolution")
def cache_config_kv_cache_layout(reader: Reader):
    """Must the KV cache layout be resolved before initialize_from_config? none / required."""
    relpath, cls = _dataclass_field(reader, CACHE_CONFIG, "CacheConfig")
    if cls is None:
        return Unknown("class CacheConfig not found")
    fn = astkit.find_function(cls, "get_resolved_kv_cache_layout")
    if fn is None:
        return Reading("none", relpath, cls.lineno)
    return Reading("required", relpath, fn.lineno)


# -- KV cache config API -------------------------------------------------------


def _kv_home(reader: Reader):
    """The module that defines the KV planning functions (0.33 moved them)."""
    for relpath in (KV_PLANNING, KV_UTILS):
        tree = reader.module(relpath)
        if tree is None:
            continue
        for name in KV_FUNCTIONS:
            node = astkit.defines(tree, name)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return relpath, tree
    if reader.module(KV_UTILS) is None:
        return None, None
    return KV_UTILS, reader.module(KV_UTILS)


@probe("kv_cache.functions")
def kv_cache_functions(reader: Reader):
    """Which of get_kv_cache_config / _configs / _config_from_groups exist."""
    relpath, tree = _kv_home(reader)
    if tree is None:
        return Unknown(f"{KV_UTILS} not found")
    present = [n for n in KV_FUNCTIONS if isinstance(astkit.defines(tree, n), (ast.FunctionDef, ast.AsyncFunctionDef))]
    return Reading(",".join(present) or "none", relpath, None)


@probe("kv_cache.module")
def kv_cache_module(reader: Reader):
    """Module defining the KV planning functions, and whether kv_cache_utils re-exports them."""
    relpath, tree = _kv_home(reader)
    if tree is None:
        return Unknown(f"{KV_UTILS} not found")
    module = _module_name(relpath)
    if relpath == KV_PLANNING:
        utils = reader.module(KV_UTILS)
        exported = utils is not None and any(astkit.imports_name(utils, n) for n in KV_FUNCTIONS)
        return Reading(f"{module}" + (" (re-exported)" if exported else ""), relpath, None)
    return Reading(module, relpath, None)


@probe("kv_cache.from_groups.kv_cache_specs")
def kv_cache_from_groups_specs(reader: Reader):
    """get_kv_cache_config_from_groups(kv_cache_specs=): required until 0.12.0, then absent."""
    relpath, tree = _kv_home(reader)
    if tree is None:
        return Unknown(f"{KV_UTILS} not found")
    fn = astkit.defines(tree, "get_kv_cache_config_from_groups")
    if not isinstance(fn, ast.FunctionDef):
        return Reading("no-function", relpath, None)
    return Reading(astkit.argument_kind(fn, "kv_cache_specs"), relpath, fn.lineno)


@probe("kv_cache.configs.global_kv_cache_groups")
def kv_cache_configs_global_groups(reader: Reader):
    """get_kv_cache_configs(global_kv_cache_groups=): required from 0.33.0."""
    relpath, tree = _kv_home(reader)
    if tree is None:
        return Unknown(f"{KV_UTILS} not found")
    fn = astkit.defines(tree, "get_kv_cache_configs")
    if not isinstance(fn, ast.FunctionDef):
        return Reading("no-function", relpath, None)
    return Reading(astkit.argument_kind(fn, "global_kv_cache_groups"), relpath, fn.lineno)


@probe("kv_cache.block_hasher_first_param")
def kv_cache_block_hasher_param(reader: Reader):
    """Name of get_request_block_hasher's first parameter (renamed hash_block_size in 0.24)."""
    for relpath in (KV_UTILS, KV_PLANNING):
        tree = reader.module(relpath)
        fn = tree and astkit.defines(tree, "get_request_block_hasher")
        if isinstance(fn, ast.FunctionDef):
            names = astkit.parameter_names(fn)
            return Reading(names[0] if names else "none", relpath, fn.lineno)
    if reader.module(KV_UTILS) is None:
        return Unknown(f"{KV_UTILS} not found")
    return Reading("absent", KV_UTILS, None)


@probe("hashing.get_hash_fn_by_name")
def hashing_module(reader: Reader):
    """Module that defines get_hash_fn_by_name (vllm.utils.hashing since 0.11.1)."""
    seen = False
    for relpath in HASH_FILES:
        tree = reader.module(relpath)
        if tree is None:
            continue
        seen = True
        node = astkit.defines(tree, "get_hash_fn_by_name")
        if isinstance(node, ast.FunctionDef):
            return Reading(_module_name(relpath), relpath, node.lineno)
    return Reading("absent", None, None) if seen else Unknown("no vllm utils module found")


# -- executor / runner ---------------------------------------------------------


def _returns_first_when_unique(fn: ast.FunctionDef) -> bool:
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


@probe("executor.collective_rpc.unique_reply_rank")
def executor_unique_reply_rank(reader: Reader):
    """MultiprocExecutor.collective_rpc(unique_reply_rank=): absent / list / single."""
    relpath, cls, fn = _method(reader, EXECUTOR, "MultiprocExecutor", "collective_rpc")
    if cls is None:
        return Unknown(f"MultiprocExecutor not found in {EXECUTOR}")
    if fn is None:
        return Unknown("MultiprocExecutor.collective_rpc not found")
    if not astkit.has_argument(fn, "unique_reply_rank"):
        return Reading("absent", relpath, fn.lineno)
    return Reading("single" if _returns_first_when_unique(fn) else "list", relpath, fn.lineno)


@probe("runner.sample_tokens_split")
def runner_sample_tokens(reader: Reader):
    """Does GPUModelRunner split execute_model from sample_tokens (0.11.1+)?"""
    relpath, cls, fn = _method(reader, GPU_RUNNER, "GPUModelRunner", "sample_tokens")
    if cls is None:
        return Unknown(f"GPUModelRunner not found in {GPU_RUNNER}")
    return Reading(fn is not None, relpath, (fn or cls).lineno)


@probe("runner.v2_default")
def runner_v2_default(reader: Reader):
    """Is Model Runner V2 the default? absent / opt-in / by-architecture / default."""
    if reader.module(RUNNER_V2) is None:
        if reader.module(GPU_RUNNER) is None:
            return Unknown(f"{GPU_RUNNER} not found")
        return Reading("absent", None, None)
    relpath, _cls, fn = _method(reader, VLLM_CONFIG, "VllmConfig", "use_v2_model_runner")
    if fn is not None:
        names = {n.attr if isinstance(n, ast.Attribute) else n.id for n in ast.walk(fn) if isinstance(n, (ast.Attribute, ast.Name))}
        final = fn.body[-1] if fn.body else None
        if names & {"_is_default_v2_model_runner_model", "DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES"}:
            return Reading("by-architecture", relpath, fn.lineno)
        if isinstance(final, ast.Return) and astkit.literal(final.value) is True:
            return Reading("default", relpath, fn.lineno)
        return Reading("opt-in", relpath, fn.lineno)
    envs = reader.text(ENVS) or ""
    line = next((i for i, t in enumerate(envs.splitlines(), 1) if '"VLLM_USE_V2_MODEL_RUNNER"' in t), None)
    if line is None:
        return Reading("opt-in", RUNNER_V2, None)
    window = "\n".join(envs.splitlines()[line - 1 : line + 3])
    return Reading("default" if '"1"' in window or "True" in window else "opt-in", ENVS, line)


# -- models ---------------------------------------------------------------------


@probe("model.input_embeddings")
def model_input_embeddings(reader: Reader):
    """LlamaModel embeds with embed_input_ids (0.11.1+) or get_input_embeddings."""
    relpath, cls, fn = _method(reader, LLAMA, "LlamaModel", "embed_input_ids")
    if cls is None:
        return Unknown(f"LlamaModel not found in {LLAMA}")
    if fn is not None:
        return Reading("embed_input_ids", relpath, fn.lineno)
    old = astkit.find_function(cls, "get_input_embeddings")
    if old is not None:
        return Reading("get_input_embeddings", relpath, old.lineno)
    return Unknown("LlamaModel has neither embed_input_ids nor get_input_embeddings")


@probe("model.eagle3_aux_layers")
def model_eagle3_aux_layers(reader: Reader):
    """SupportsEagle3 default-layer getter name (renamed in 0.18.0)."""
    tree = reader.module(INTERFACES)
    if tree is None:
        return Unknown(f"{INTERFACES} not found")
    cls = astkit.find_class(tree, "SupportsEagle3")
    if cls is None:
        return Reading("absent", INTERFACES, None)
    for name in ("get_eagle3_default_aux_hidden_state_layers", "get_eagle3_aux_hidden_state_layers"):
        fn = astkit.find_function(cls, name)
        if fn is not None:
            return Reading(name, INTERFACES, fn.lineno)
    return Unknown("SupportsEagle3 has no aux-layer getter")
