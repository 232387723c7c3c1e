"""What one harness process runs with, decided once at its start and passed to whatever needs it (no module
global is rebound at run time): the model, the device vLLM's platform resolved, the bound, the reference, and
the hooks a caller (tests/contract/mla_harness.py) gives for its models and TP/PP."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

#: the share of a GPU each engine of this harness takes on CUDA (compat confirm --gpu-memory-utilization): the CLI
#: confirm and the vllm-extract reference run beside the generator runs, and speculators' default 0.8 lets only
#: one engine start per GPU (and the GPU lane runs sessions side by side); the tiny models need a few MiB of KV
GPU_SHARE = 0.15


@dataclass(frozen=True)
class Settings:
    model: str
    out_dir: Path  # every run's own files go under it
    device_type: str  # vLLM's platform device type ("cpu", "cuda")
    rtol: float  # the per-layer bound the harness asks compat confirm to judge with
    tolerance: str  # its rule, in words
    max_batched: int = 96
    #: ``(model, prompts, layers) -> (hf_model, refs, depth)``, compare()'s reference (mla_harness: its own)
    reference: Callable | None = None
    #: ``gen_module -> gen_module``: the generator class a run drives (mla_harness: TP/PP)
    wrap: Callable | None = None
    #: ``() -> dict``: facts of the process a run ran in, added to its result (mla_harness: the PP stages)
    facts: Callable | None = None

    @property
    def on_cpu(self) -> bool:
        return self.device_type in (None, "cpu")

    @property
    def one_engine_at_a_time(self) -> bool:
        """On CUDA the harness starts no engine while another of its engines runs: vLLM's start-up memory profile
        fails when another process on the GPU frees memory meanwhile ("Error in memory profiling. Initial free
        memory 131.35 GiB, current free memory 137.94 GiB", vLLM 0.20 on an H200, the vllm-extract reference
        beside a generator run)."""
        return not self.on_cpu

    def gpu_share_args(self) -> list[str]:
        """compat confirm's arguments that let this harness's engines share the GPU (none on CPU)."""
        return [] if self.on_cpu else ["--gpu-memory-utilization", str(GPU_SHARE)]

    def gpu_share_engine(self) -> dict:
        return {} if self.on_cpu else {"gpu_memory_utilization": GPU_SHARE}

    def hf_reference(self, prompts, layers):
        if self.reference is not None:
            return self.reference(self.model, prompts, layers)
        from tests.contract.confirm_api import hf_reference

        return hf_reference(self.model, prompts, layers)


def resolve(model: str, out_dir: Path, rtol: float | None = None, **hooks) -> Settings:
    """Settings for this process: the float32 bound of the device vLLM's platform resolves here (1e-3 on CPU,
    2e-2 on CUDA, whose float32 attention runs in TF32), unless the caller gives its own ``rtol``."""
    from vllm.platforms import current_platform  # NVML on CUDA: CUDA itself stays uninitialised in this process

    from tests.contract.confirm_api import device_bound

    device_type = current_platform.device_type
    if rtol is None:
        rtol, rule = device_bound(device_type)
    else:
        rule = f"per layer max|diff| / mean|h_ref| <= {rtol:g} (given to the harness)"
    return Settings(model=model, out_dir=Path(out_dir), device_type=device_type, rtol=rtol, tolerance=rule, **hooks)
