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
    --installed   import the generator from site-packages as it is (patched or not)
    --proofs      for each needed patch, install (with the real patcher) every
                  *other* needed patch, run the generator, then reinstall all of
                  them and run again.  The parent imports vLLM once; vLLM's CPU
                  platform spawns workers, which import the variant from disk.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

LAYERS = [0, 1, 3]


from compat.confirm import GEN_MOD, error_report, hf_reference, make_calls  # noqa: E402
from compat.confirm import run_generator as _confirm_run  # noqa: E402


def run_generator(gen_module, model, calls, reference, max_batched=None, runtime_checks=False):
    """compat.confirm's run, plus (on request) observation of the live engine."""
    return _confirm_run(gen_module, model, calls, reference, LAYERS, max_batched,
                        after=observe_engine if runtime_checks else None)


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
    for name in ("max_model_len", "is_encoder_decoder"):
        try:
            SchedulerConfig(**{k: v for k, v in (("max_model_len", 512), ("is_encoder_decoder", False)) if k != name})
            seen[f"scheduler_config.{name}"] = "optional"
        except TypeError:
            seen[f"scheduler_config.{name}"] = "required"
        except Exception as exc:  # pydantic's ValidationError: "Field required"
            seen[f"scheduler_config.{name}"] = "required" if "required" in str(exc).lower() else f"error: {exc}"
    seen["cache_config.enable_prefix_caching_default"] = repr(CacheConfig().enable_prefix_caching)
    try:
        from vllm.model_executor.models.llama import LlamaModel

        seen["model.input_embeddings"] = "embed_input_ids" if hasattr(LlamaModel, "embed_input_ids") else "get_input_embeddings"
    except Exception as exc:  # noqa: BLE001
        seen["model.input_embeddings"] = f"error: {exc}"
    return seen


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
    seen = {}
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


def proofs(model, calls, reference, max_batched, only=None, skip=None):
    """Leave-one-out on disk: vLLM's CPU platform spawns workers, which import from site-packages."""
    import copy
    import hashlib
    import importlib

    from compat.patcher import Patcher, open_target

    surface, decisions = needed_decisions()
    patcher = Patcher(open_target("speculators"))

    def install(subset):
        fresh = [copy.copy(d) for d in subset]
        patcher.apply(fresh, surface.fingerprint())
        bad = [d for d in fresh if d.verdict not in ("apply", "already-applied")]
        if bad:
            raise RuntimeError(f"could not install variant: {[(d.patch.id, d.verdict, d.reason) for d in bad]}")
        return importlib.reload(importlib.import_module(GEN_MOD))

    report = {"surface": surface.fingerprint(), "needed": [d.patch.id for d in decisions], "runs": {}}
    skip = set(skip or ())
    try:
        for left_out in [d for d in decisions if (only is None or d.patch.id in only) and d.patch.id not in skip]:
            module = install([d for d in decisions if d is not left_out])
            run = run_generator(module, model, calls, reference, max_batched)
            report["runs"][left_out.patch.id] = run
            print(f"[proof] without {left_out.patch.id}: ok={run['ok']} {run['seconds']}s "
                  f"{((run['error'] or {}).get('message') or '')[:100]!r}", flush=True)
    finally:
        install(decisions)  # the full set again; the patched run already proved it correct
    dist = open_target("speculators")
    report["all_files_sha256"] = {
        rel: hashlib.sha256(dist.path(rel).read_bytes()).hexdigest()
        for d in decisions for rel in d.patch.files(d.variant)
    }
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--mode", choices=("installed", "proofs"), default="installed")
    parser.add_argument("--calls", default="1,11,33,11")
    parser.add_argument("--max-batched-tokens", type=int, default=96)
    parser.add_argument("--only", action="append")
    parser.add_argument("--skip", action="append", help="patch ids not to leave out (unobservable here)")
    parser.add_argument("--runtime-checks", action="store_true")
    args = parser.parse_args(argv)
    calls = make_calls([int(n) for n in args.calls.split(",")])
    started = time.monotonic()
    reference = hf_reference(args.model, [p for call in calls for p in call], LAYERS)
    from compat.confirm import ATOL

    doc = {"layers": LAYERS, "atol": ATOL, "hf_seconds": round(time.monotonic() - started, 2)}
    if args.mode == "installed":
        if args.runtime_checks:
            doc["static_api"] = observe_static_api()
        try:
            import importlib

            module = importlib.import_module(GEN_MOD)
        except BaseException as exc:  # noqa: BLE001
            doc["run"] = {"ok": False, "stage": "import", "calls": [], "error": error_report(exc)}
        else:
            doc["run"] = run_generator(module, args.model, calls, reference, args.max_batched_tokens, args.runtime_checks)
            if args.runtime_checks and doc["run"].get("block_size"):
                doc["request_hashing"] = observe_request_hashing(doc["run"]["block_size"])
    else:
        doc["proofs"] = proofs(args.model, calls, reference, args.max_batched_tokens, args.only, args.skip)
    doc["seconds"] = round(time.monotonic() - started, 2)
    with open(args.out, "w") as handle:
        json.dump(doc, handle, indent=2, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
