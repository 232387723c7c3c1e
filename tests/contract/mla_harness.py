"""tests.contract.harness for the MLA/MoE models and for TP/PP > 1, without editing harness.py.

    python -m tests.contract.mla_harness [--rtol R] [--tp N] [--pp N] HARNESS-ARGS...

Everything else (modes, reports, leave-one-out proofs) is tests.contract.harness itself;
this module only hands its main() three hooks (tests/contract/settings.py):

* the reference: ``fixtures.tiny_mla.hf_reference`` (loads the Kimi-K2.5 wrapper as well as
  DeepSeek-V3; ``compat.confirm.hf_reference`` only knows causal LMs), or with
  ``--vllm-ref FILE`` vLLM's own forward of the same prompts (``python -m fixtures.tiny_mla
  vllm-ref``: plain vLLM engine, no speculators, hooks on the decoder layers);
* the tolerance: ``--rtol`` replaces the device's bound for this harness run (the MLA tests
  pass the kit's 1e-3: vLLM's own forward is within 4.4e-6 of HF on the YaRN models, measured
  and justified in tests/contract/test_mla_models.py);
* on a host with AMX tiles whose vLLM picks AMX_MLA (bfloat16 kernels only) for every MLA model, the
  generator's VllmConfig is built with CPU_MLA (tests/contract/amx_host.py ``with_cpu_mla``; speculators
  takes no backend argument, and the kit's plan says NO for such models there: compat/amx.py), and each run's
  report says so (``attention_backend``);
* the generator class handed to the run: ``--tp`` passes ``tensor_parallel_size`` (the
  generator's own argument); ``--pp`` builds the generator's ParallelConfig with
  ``pipeline_parallel_size`` (speculators exposes no argument for it, so this is how a
  user must do it: its module-level ``ParallelConfig`` name, during construction only).

``--pp-buffers`` (with ``--pp`` > 1) works around a vLLM CPU bug, not a generator one: a
non-first pipeline stage receives the previous stage's tensors into
``model_runner.intermediate_tensors``, which vLLM allocates only in ``_dummy_run`` (the GPU
worker's memory profile and warm-up).  vLLM's CPU worker skips that run in eager mode with an
explicit KV size, so stage 1 fails its first step with ``assert self.intermediate_tensors is not
None`` (``sync_and_gather_intermediate_tensors``), in plain ``vllm.LLM(pipeline_parallel_size=2,
enforce_eager=True)`` as well; the generator hard-codes ``enforce_eager=True``.  The flag
allocates that buffer in each worker exactly as ``_dummy_run`` does, after the generator's
``__init__``; nothing of the generator changes.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import sys
import types
from pathlib import Path

from tests.contract import amx_host, harness


def allocate_pp_buffers(worker) -> bool:
    """In a vLLM worker (collective_rpc): the receive buffer of a non-first pipeline stage, as _dummy_run makes it."""
    from vllm.distributed import get_pp_group

    runner = worker.model_runner
    if get_pp_group().is_first_rank or getattr(runner, "intermediate_tensors", False) is not None:
        return False
    runner.intermediate_tensors = runner.model.make_empty_intermediate_tensors(
        batch_size=runner.max_num_tokens, dtype=runner.model_config.dtype, device=runner.device)
    return True


def stage_facts(worker) -> dict:
    """In a vLLM worker (collective_rpc): its ranks, the decoder layers its stage holds and those it captures."""
    from vllm.distributed import get_pp_group, get_tp_group

    model = worker.model_runner.model
    base = model.get_language_model().model if hasattr(model, "get_language_model") else model.model
    held = list(range(base.start_layer, base.end_layer))
    return {"pp_rank": get_pp_group().rank_in_group, "tp_rank": get_tp_group().rank_in_group, "layers": held,
            "capture_layers": sorted(set(held) & set(getattr(worker, "_layer_ids", ()))),
            "receive_buffer": getattr(worker.model_runner, "intermediate_tensors", None) is not None}


#: stage_facts of every rank, one list per engine this process started at PP > 1 (each run's result carries its
#: process's list; main() gathers them into the report)
STAGES: list = []


def parallel_module(gen_module, tp: int, pp: int, pp_buffers: bool = False, async_scheduling: bool | None = None):
    """A stand-in for the generator module whose class runs at TP=tp, PP=pp (nothing else changed).

    ``async_scheduling``: None leaves vLLM's own choice; True/False builds the generator's SchedulerConfig with it
    (an A/B of one engine setting, as a user would pass it; the generator takes no such argument)."""
    base = gen_module.VllmHiddenStatesGenerator

    class Parallel(base):
        def __init__(self, *args, **kwargs):
            kwargs["tensor_parallel_size"] = tp
            if pp == 1 and async_scheduling is None:
                super().__init__(*args, **kwargs)
                return
            originals = {"ParallelConfig": gen_module.ParallelConfig, "SchedulerConfig": gen_module.SchedulerConfig}
            gen_module.ParallelConfig = functools.partial(originals["ParallelConfig"], pipeline_parallel_size=pp)
            if async_scheduling is not None:
                gen_module.SchedulerConfig = functools.partial(originals["SchedulerConfig"],
                                                               async_scheduling=async_scheduling)
            try:
                super().__init__(*args, **kwargs)
            finally:
                for name, value in originals.items():
                    setattr(gen_module, name, value)
            if pp == 1:
                return
            if pp_buffers:
                self.executor.collective_rpc(allocate_pp_buffers)
            STAGES.append(self.executor.collective_rpc(stage_facts))

    Parallel.__init__.__signature__ = inspect.signature(base.__init__)
    Parallel.__name__ = Parallel.__qualname__ = base.__name__
    return types.SimpleNamespace(VllmHiddenStatesGenerator=Parallel, __name__=gen_module.__name__)


def vllm_reference(file: str, model: str, layers):
    """compare()'s reference tuple from vLLM's own forward (the final norm from HF's decoder: same weights)."""
    import torch

    from fixtures import tiny_mla

    saved = torch.load(file, weights_only=False)
    _, decoder = tiny_mla.load_hf(model)
    holder = torch.nn.Module()
    holder.model = decoder
    refs = {prompt: [states[k] for k in layers] for prompt, states in saved["refs"].items()}
    return holder, refs, decoder.config.num_hidden_layers


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--rtol", type=float)
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--pp", type=int, default=1)
    parser.add_argument("--pp-buffers", action="store_true", help="allocate stage 1's receive buffer (vLLM CPU bug)")
    parser.add_argument("--vllm-ref")
    parser.add_argument("--async-scheduling", choices=("on", "off"), help="default: vLLM's own choice")
    ours, rest = parser.parse_known_args(argv)

    from fixtures import tiny_mla

    if ours.vllm_ref:
        def reference(model, prompts, layers):
            return vllm_reference(ours.vllm_ref, model, layers)
    else:
        def reference(model, prompts, layers):
            return tiny_mla.hf_reference(model, prompts, layers)
    chosen = None if ours.async_scheduling is None else ours.async_scheduling == "on"

    model = rest[rest.index("--model") + 1] if "--model" in rest else None
    # an AMX host whose vLLM picks AMX_MLA (bf16 kernels) for any dtype: the generator's config names CPU_MLA
    cpu_mla = amx_host.mla_needs_cpu_mla(model) if model else ""

    def wrap(gen_module):
        if cpu_mla:
            gen_module = amx_host.with_cpu_mla(gen_module)
        if ours.tp > 1 or ours.pp > 1 or chosen is not None:
            return parallel_module(gen_module, ours.tp, ours.pp, ours.pp_buffers, chosen)
        return gen_module

    def facts():
        return {**({"pp_stages": list(STAGES)} if ours.pp > 1 else {}),
                **({"attention_backend": {"CPU_MLA": cpu_mla}} if cpu_mla else {})}

    code = harness.main(rest, rtol=ours.rtol, reference=reference, wrap=wrap, facts=facts)
    if ours.pp > 1:  # each run's stages, in the order of the runs (one run, or the proofs')
        out = Path(rest[rest.index("--out") + 1])
        doc = json.loads(out.read_text())
        runs = [doc["run"]] if "run" in doc else list(doc.get("proofs", {}).get("runs", {}).values())
        doc["pp_stages"] = [stages for run in runs for stages in run.pop("pp_stages", [])]
        out.write_text(json.dumps(doc, indent=2, default=str))
    return code


if __name__ == "__main__":
    sys.exit(main())
