"""Observers: pure functions from a live vLLM (its classes, a running generator, one of its workers) to facts in
the probes' vocabulary.  They change nothing the run is judged on; the contract tests compare what they saw with
what the static probes read in the files (``compat.surface``) and with the claims the patches rest on.
"""

from __future__ import annotations

import inspect
import os
import sys

def _kind(sig: inspect.Signature, name: str) -> str:
    param = sig.parameters.get(name)
    if param is None:
        return "absent"
    return "required" if param.default is inspect.Parameter.empty else "optional"


def observe_static_api() -> dict:
    """What the imported vLLM actually exposes, in the probes' vocabulary."""
    import dataclasses

    from vllm.config import CacheConfig, SchedulerConfig
    from vllm.v1.core import kv_cache_utils
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.executor.multiproc_executor import MultiprocExecutor
    from vllm.v1.request import Request
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    seen = {}
    req = inspect.signature(Request.__init__)
    for name in ("block_hasher", "eos_token_id", "structured_output_request", "pooling_params"):
        seen[f"request.{name}"] = _kind(req, name)
    sched = inspect.signature(Scheduler.__init__)
    seen["scheduler.block_size"] = _kind(sched, "block_size")
    seen["scheduler.hash_block_size"] = _kind(sched, "hash_block_size")
    seen["executor.collective_rpc.unique_reply_rank.param"] = _kind(
        inspect.signature(MultiprocExecutor.collective_rpc), "unique_reply_rank")
    seen["runner.sample_tokens_split"] = hasattr(GPUModelRunner, "sample_tokens")
    hasher = getattr(kv_cache_utils, "get_request_block_hasher", None)
    seen["kv_cache.block_hasher_first_param"] = next(iter(inspect.signature(hasher).parameters)) if hasher else "absent"
    groups = getattr(kv_cache_utils, "get_kv_cache_config_from_groups", None)
    seen["kv_cache.from_groups.kv_cache_specs"] = (
        _kind(inspect.signature(groups), "kv_cache_specs") if groups else "no-function")
    fields = {f.name: f for f in dataclasses.fields(SchedulerConfig)}
    if "async_scheduling" in fields:
        default = fields["async_scheduling"].default
        default = getattr(default, "default", default)  # pydantic Field(default=None) in 0.14-0.16
        seen["scheduler_config.async_scheduling_default"] = "None->auto-on" if default is None else repr(default)
    else:
        seen["scheduler_config.async_scheduling_default"] = "absent"
    accepted = inspect.signature(SchedulerConfig).parameters  # InitVars included; 0.11.0 has no is_encoder_decoder
    for name in ("max_model_len", "is_encoder_decoder"):
        if name not in accepted:
            seen[f"scheduler_config.{name}"] = "absent"
            continue
        try:
            SchedulerConfig(**{k: v for k, v in (("max_model_len", 512), ("is_encoder_decoder", False))
                               if k != name and k in accepted})
            seen[f"scheduler_config.{name}"] = "optional"
        except TypeError:
            seen[f"scheduler_config.{name}"] = "required"
        except Exception as exc:  # pydantic's ValidationError: "Field required"
            seen[f"scheduler_config.{name}"] = "required" if "required" in str(exc).lower() else f"error: {exc}"
    seen["cache_config.enable_prefix_caching_default"] = repr(CacheConfig().enable_prefix_caching)
    seen["cache_config.kv_cache_layout_resolution"] = observe_layout_resolution(CacheConfig)
    seen["kv_cache.module"] = observe_kv_planning_module()
    seen["transformers.config_torch_annotation"] = observe_config_torch_annotation()
    try:
        from vllm.model_executor.models.llama import LlamaModel

        seen["model.input_embeddings"] = "embed_input_ids" if hasattr(LlamaModel, "embed_input_ids") else "get_input_embeddings"
    except Exception as exc:  # noqa: BLE001
        seen["model.input_embeddings"] = f"error: {exc}"
    return seen


def observe_layout_resolution(cache_config_cls) -> str:
    """Does a fresh CacheConfig refuse to name its KV layout until the engine resolves it?"""
    if not hasattr(cache_config_cls, "get_resolved_kv_cache_layout"):
        return "none"
    try:
        cache_config_cls().get_resolved_kv_cache_layout()
    except ValueError as exc:
        return "required" if "not been resolved" in str(exc) else f"error: {exc}"
    return "resolved-by-default"


def observe_kv_planning_module() -> str:
    """Where the imported get_kv_cache_config_from_groups is defined, and whether kv_cache_utils re-exports it."""
    import importlib

    from vllm.v1.core import kv_cache_utils

    fn = getattr(kv_cache_utils, "get_kv_cache_config_from_groups", None)
    if fn is None:
        try:
            fn = importlib.import_module("vllm.v1.core.kv_cache_planning").get_kv_cache_config_from_groups
        except (ImportError, AttributeError):
            return "absent"
        return fn.__module__
    if fn.__module__ == kv_cache_utils.__name__:
        return fn.__module__
    return f"{fn.__module__} (re-exported)"


def observe_config_torch_annotation() -> str:
    """Evaluate PreTrainedConfig's torch.* annotations in their own module, as pydantic does.

    Must run before speculators is imported: its patched config.py makes the name resolvable.
    """
    import importlib

    if "speculators" in sys.modules:
        return "error: speculators already imported"
    module = importlib.import_module("transformers.configuration_utils")
    cls = getattr(module, "PreTrainedConfig", None) or module.PretrainedConfig
    annotations = {k: v for klass in reversed(cls.__mro__) for k, v in vars(klass).get("__annotations__", {}).items()}
    torch_ones = {k: v for k, v in annotations.items() if "torch." in (v if isinstance(v, str) else repr(v))}
    if not torch_ones:
        return "none"
    for annotation in torch_ones.values():
        for text in _forward_texts(annotation):
            try:
                eval(text, vars(module))  # noqa: S307 - the library's own annotation text
            except NameError:
                return "unresolvable"
    return "resolvable"


def _forward_texts(annotation) -> list[str]:
    """The strings pydantic must evaluate: a str annotation, or the ForwardRefs inside Union[..., "torch.x"]
    (transformers 5.17 on Python 3.12: Union[str, ForwardRef('torch.dtype'), None], torch only if TYPE_CHECKING)."""
    import typing

    if isinstance(annotation, str):
        return [annotation]
    if isinstance(annotation, typing.ForwardRef):
        return [annotation.__forward_arg__]
    return [text for arg in typing.get_args(annotation) for text in _forward_texts(arg)]


def _v2_chosen(vllm_config, env_unset: bool):
    """vLLM's own choice of Model Runner V2 for this config, were Triton present; None if V2 is absent.

    The CPU lane lacks Triton, so vLLM's resolution is evaluated with HAS_TRITON forced on;
    ``env_unset`` hides VLLM_USE_V2_MODEL_RUNNER.  The workers' real runner is observed in worker_facts.
    """
    import importlib
    import importlib.util

    try:
        if importlib.util.find_spec("vllm.v1.worker.gpu.model_runner") is None:
            return None
    except ModuleNotFoundError:  # find_spec imports the parents: vllm.v1.worker.gpu is absent before 0.12
        return None
    saved_env = os.environ.pop("VLLM_USE_V2_MODEL_RUNNER", None) if env_unset else None
    try:
        import vllm.envs as envs

        prop = getattr(type(vllm_config), "use_v2_model_runner", None)
        if not isinstance(prop, property):  # 0.12-0.21: the worker reads the variable itself
            return bool(envs.VLLM_USE_V2_MODEL_RUNNER)
        home = importlib.import_module(type(vllm_config).__module__)
        saved = getattr(home, "HAS_TRITON", None)
        home.HAS_TRITON = True
        try:
            return bool(prop.fget(vllm_config))
        finally:
            home.HAS_TRITON = saved
    finally:
        if saved_env is not None:
            os.environ["VLLM_USE_V2_MODEL_RUNNER"] = saved_env


def observe_v2_default(vllm_config) -> str:
    """Would this engine pick Model Runner V2 for this model with nothing opting in or out?"""
    chosen = _v2_chosen(vllm_config, env_unset=True)
    return "absent" if chosen is None else "default" if chosen else "opt-in"


def observe_v2_selected(vllm_config) -> str:
    """The same, with this environment's VLLM_USE_V2_MODEL_RUNNER as it is."""
    chosen = _v2_chosen(vllm_config, env_unset=False)
    return "absent" if chosen is None else "v2" if chosen else "v1"


def worker_facts(worker) -> dict:
    """Runs inside each vLLM worker (collective_rpc): what the engine really uses."""
    runner = worker.model_runner
    model = runner.get_model() if hasattr(runner, "get_model") else runner.model
    config = worker.vllm_config
    try:
        from vllm.model_executor.models.interfaces import supports_eagle3

        eagle3 = bool(supports_eagle3(model))
    except ImportError:
        eagle3 = None
    return {
        "runner_class": f"{type(runner).__module__}.{type(runner).__qualname__}",
        "runner_has_input_batch": hasattr(runner, "input_batch"),
        "use_v2_model_runner": bool(getattr(worker, "use_v2_model_runner", False)),
        "async_scheduling": config.scheduler_config.async_scheduling,
        "pipeline_parallel_size": config.parallel_config.pipeline_parallel_size,
        "model_class": type(model).__name__,
        "supports_eagle3": eagle3,
        # a spawned child imports the parent's main module as __mp_main__; a forked one shares __main__
        "spawned": sys.modules["__main__"].__name__ == "__mp_main__",
    }


#: vLLM's thread-binding knobs: the binding runs unset them, so the engine binds as vLLM does by default ("auto")
BINDING_VARS = ("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU", "VLLM_CPU_SIM_MULTI_NUMA")
BINDING_PATCH = "platform.cpu_workers_bind_every_core"


def thread_binding_facts(worker=None) -> dict:
    """Runs inside each vLLM worker (collective_rpc): its OpenMP threads and the cores they may run on.

    vLLM pins the pool's threads one core each (its preloaded libgomp's GOMP_CPU_AFFINITY, else OMP_PLACES or
    KMP_AFFINITY) and the main thread on the first, so the pool's cores are the union over its threads."""
    import torch

    torch.mm(torch.ones(256, 256), torch.ones(256, 256))  # an OpenMP region: the pool's threads exist
    tasks = {}
    for tid in sorted(os.listdir("/proc/self/task"), key=int):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                name = f.read().split("(", 1)[1].rsplit(")", 1)[0]
            tasks[tid] = [name, sorted(os.sched_getaffinity(int(tid)))]
        except OSError:
            continue
    keys = ("OMP_NUM_THREADS", "OMP_PLACES", "OMP_PROC_BIND", "GOMP_CPU_AFFINITY", "KMP_AFFINITY", "LD_PRELOAD",
            "VLLM_CPU_NUM_OF_RESERVED_CPU")
    return {"threads": torch.get_num_threads(), "cores": sorted({c for _, cores in tasks.values() for c in cores}),
            "main_thread": sorted(os.sched_getaffinity(0)), "tasks": tasks, **{k: os.environ.get(k) for k in keys}}


def observe_thread_binding(gen) -> dict:
    replies = gen.executor.collective_rpc(thread_binding_facts)
    return {"allowed": sorted(os.sched_getaffinity(0)), "workers": replies if isinstance(replies, list) else [replies]}


def observe_reasons_and_binding(gen) -> dict:
    return {**observe_reasons(gen), "binding": observe_thread_binding(gen)}


def observe_reasons(gen) -> dict:
    """The facts a patch's 'cannot show on this CPU' claim rests on, from the live engine and its workers."""
    import inspect as _inspect

    replies = gen.executor.collective_rpc(worker_facts)
    return {
        "workers": replies if isinstance(replies, list) else [replies],
        "parent_async_scheduling": gen.vllm_config.scheduler_config.async_scheduling,
        "worker_multiproc_method": os.environ.get("VLLM_WORKER_MULTIPROC_METHOD"),  # what vLLM's executor read
        "generator_has_pipeline_parallel_size": "pipeline_parallel_size" in _inspect.signature(type(gen).__init__).parameters,
    }


def observe_request_hashing(block_size: int) -> dict:
    """Build a Request with and without block_hasher and look at its block hashes."""
    from vllm.sampling_params import SamplingParams
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.request import Request

    try:
        from vllm.utils.hashing import get_hash_fn_by_name
    except ImportError:
        from vllm.utils import get_hash_fn_by_name
    params = inspect.signature(Request.__init__).parameters
    base = dict(request_id="probe", prompt_token_ids=list(range(4, 4 + 2 * block_size)),
                sampling_params=SamplingParams(max_tokens=1), pooling_params=None, arrival_time=0.0)
    if "eos_token_id" in params:
        base["eos_token_id"] = 2
    hash_fn = get_hash_fn_by_name("sha256")
    init_none_hash(hash_fn)
    with_hasher = Request(**base, block_hasher=get_request_block_hasher(block_size, hash_fn))
    without = Request(**base)
    return {"with_block_hasher": len(with_hasher.block_hashes), "without_block_hasher": len(without.block_hashes)}


def observe_engine(gen) -> dict:
    """collective_rpc's reply shape and the execute_model/sample_tokens contract, on the live engine."""
    seen = {"runner.v2_default": observe_v2_default(gen.vllm_config),
            "runner.v2_selected": observe_v2_selected(gen.vllm_config), "reasons": observe_reasons(gen)}
    try:
        reply = gen.executor.collective_rpc("get_kv_cache_spec", unique_reply_rank=0)
        seen["executor.collective_rpc.unique_reply_rank"] = "list" if isinstance(reply, list) else "single"
    except TypeError:
        seen["executor.collective_rpc.unique_reply_rank"] = "absent"
    # execute_model twice without sample_tokens
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request, RequestStatus

    params = inspect.signature(Request.__init__).parameters
    kwargs = dict(request_id="probe-split", prompt_token_ids=list(range(4, 40)),
                  sampling_params=SamplingParams(max_tokens=1), pooling_params=None, arrival_time=0.0)
    if "eos_token_id" in params:
        kwargs["eos_token_id"] = 2
    if getattr(gen, "block_hasher", None) is not None:
        kwargs["block_hasher"] = gen.block_hasher
    gen.scheduler.add_request(Request(**kwargs))
    first = gen.scheduler.schedule()
    try:
        gen.executor.execute_model(first)
        second = gen.scheduler.schedule()
        gen.executor.execute_model(second)
        seen["runner.sample_tokens_split"] = False
        seen["double_execute_error"] = None
    except Exception as exc:  # noqa: BLE001
        seen["double_execute_error"] = str(exc)[:500]
        seen["runner.sample_tokens_split"] = "sample_tokens() must be called after execute_model() returns None" in str(exc)
    finally:
        try:
            gen.scheduler.finish_requests(["probe-split"], RequestStatus.FINISHED_ABORTED)
        except Exception:  # noqa: BLE001
            pass
    return seen



def speculators_file(worker=None) -> str | None:
    """Where this process imported speculators from (also run in each vLLM worker, through collective_rpc)."""
    return getattr(sys.modules.get("speculators"), "__file__", None)
