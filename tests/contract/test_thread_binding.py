"""platform.cpu_workers_bind_every_core (p36), proven twice on real vLLM by observing the running engine.

vLLM's CPU platform binds each worker's OpenMP threads by VLLM_CPU_OMP_THREADS_BIND (default ``auto``).
From vLLM 0.20.0, ``auto`` keeps ``local_world_size`` cores free for the engine's scheduler process
(vllm/utils/ompmultiprocessing.py OMPProcessManager); up to 0.19.1 cpu_worker.py reserved none at world
size 1.  The generator's scheduler is the caller's own process, idle while the workers compute, so the
patch defaults vLLM's own knob VLLM_CPU_NUM_OF_RESERVED_CPU to 0.

One engine per side, each a spawned run of the cell's harness with vLLM's defaults (no VLLM_CPU_* binding
variable set in its process; spawned because OpenMP reads the binding vLLM sets in the environment only when a
process starts), the generator as the kit installed it:

* p36 left out (``compat.apply --exclude``, its leave-one-out proof run): inside the worker (collective_rpc, after an OpenMP region)
  torch.get_num_threads() and the cores its threads may run on (os.sched_getaffinity of every thread:
  vLLM pins the pool's threads one core each, the main thread on the first) are every allowed core but
  the last on vLLM >= 0.20 (1 of 2 here), every allowed core on older releases (nothing to fix at TP=1);
* p36 applied (the proof run that leaves out together what cannot show on this CPU): every allowed core, and the worker saw VLLM_CPU_NUM_OF_RESERVED_CPU=0.

Timing is not asserted here: benchmarks/extract_throughput.py prints it.
"""

from __future__ import annotations

import json
import os
import platform

import pytest


@pytest.fixture(scope="module")
def binding(binding_report, engine_device):
    if engine_device != "cpu":
        pytest.skip("vLLM's CPU platform only: the patch is a no-op elsewhere")
    assert binding_report is not None, "the cell ran no spawned pair of runs to observe the binding in"
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one allowed core: nothing to reserve")
    runs = {}
    for side, run in binding_report.items():
        assert run["ok"] and run["error"] is None, (side, run["error"] or [c["problems"] for c in run["calls"]])
        runs[side] = run["runtime"]
    print("thread binding:", json.dumps({side: _brief(run) for side, run in runs.items()}))  # shown with -s
    return runs


def _brief(run: dict) -> dict:
    return {**run, "workers": [{k: v for k, v in w.items() if k != "tasks"} for w in run["workers"]]}


def _reserves_by_default(vllm_release: str) -> bool:
    """vLLM >= 0.20.0 (OMPProcessManager) reserves local_world_size cores on x86/ARM/RISC-V by default: an upstream
    fact, read here from the installed release and the machine, without importing vLLM into pytest's process."""
    from packaging.version import Version

    return (Version(vllm_release).release >= (0, 20)
            and platform.machine() in ("x86_64", "AMD64", "aarch64", "arm64", "riscv64"))


def test_left_out_the_worker_gets_what_auto_binding_leaves(binding, vllm_installed):
    run = binding["left_out"]
    allowed = run["allowed"]
    want = allowed[:-1] if _reserves_by_default(vllm_installed["vllm"][0].version) else allowed
    (worker,) = run["workers"]
    assert worker["VLLM_CPU_NUM_OF_RESERVED_CPU"] is None, worker
    assert worker["cores"] == want and worker["threads"] == len(want), (_brief(run), want)


def test_patched_the_worker_gets_every_core(binding):
    run = binding["patched"]
    allowed = run["allowed"]
    (worker,) = run["workers"]
    assert worker["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0", worker
    assert worker["cores"] == allowed and worker["threads"] == len(allowed), _brief(run)
