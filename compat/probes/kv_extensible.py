"""The probe ``kv_cache.extensible``: vLLM's extensible KV cache (0.34, ``vllm/v1/worker/extensible_kv_cache.py``).

Why: with it, ``Worker.initialize_from_config`` only reserves the KV cache's address space and builds no KV
connector; the cache's blocks are backed in warm-up and in ``extend_kv_cache``, which vLLM's engine core calls after
warm-up, and the connector is created there too.  The serve path meets a connector built later than before;
speculators' generator, which drives the executor itself and calls neither, meets a cache with no block backed.  On
by default where supported (``CacheConfig.enable_extensible_kv_cache`` is None and ``VllmConfig`` turns it on for
CUDA and ROCm), off with ``--no-enable-extensible-kv-cache``.

Values: ``absent`` (no such module, and the GPU worker does not name ``extend_kv_cache``),
``on-by-default``, ``off-by-default``; a shape not seen is unknown.
"""

from __future__ import annotations

import ast

from .. import astkit
from ..astkit import Reader
from .base import Reading, Unknown, probe

EXTENSIBLE = "vllm/v1/worker/extensible_kv_cache.py"
CACHE_CONFIG = "vllm/config/cache.py"
GPU_WORKER = "vllm/v1/worker/gpu_worker.py"


def _field_default(tree: ast.Module, cls_name: str, name: str):
    """(the default's source, line) of a dataclass field of a module-level class, or None."""
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls_name), None)
    for node in cls.body if cls is not None else []:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            value = node.value
            if isinstance(value, ast.Call) and astkit.dotted_name(value.func) in ("Field", "field"):
                value = next((k.value for k in value.keywords if k.arg == "default"), None)
            return (ast.unparse(value) if value is not None else None), node.lineno
    return None


@probe("kv_cache.extensible", values=("absent", "on-by-default", "off-by-default"))
def extensible_kv_cache(reader: Reader):
    """absent / on-by-default / off-by-default: the extensible KV cache, whose worker builds the KV connector and
    backs the cache's blocks in extend_kv_cache, after warm-up."""
    tree = reader.module(EXTENSIBLE)
    if tree is None:
        if reader.module(GPU_WORKER) is None:
            return Unknown(f"neither {EXTENSIBLE} nor {GPU_WORKER} found")
        if "extend_kv_cache" in (reader.text(GPU_WORKER) or ""):  # the worker wires it: the module moved
            return Unknown(f"{GPU_WORKER} names extend_kv_cache but {EXTENSIBLE} is not there: moved, not read here")
        return Reading("absent", GPU_WORKER, None)
    extend = astkit.find_function(tree, "extend_kv_cache")
    if extend is None or not [c for c in ast.walk(extend) if isinstance(c, ast.Call)
                              and (astkit.dotted_name(c.func) or "").endswith("ensure_kv_transfer_initialized")]:
        return Unknown(f"{EXTENSIBLE}: extend_kv_cache does not build the KV connector (ensure_kv_transfer_initialized)"
                       ", a shape not seen")
    config = reader.module(CACHE_CONFIG)
    found = _field_default(config, "CacheConfig", "enable_extensible_kv_cache") if config is not None else None
    if found is None:
        return Unknown(f"CacheConfig.enable_extensible_kv_cache not found in {CACHE_CONFIG}")
    default, line = found
    if default == "False":
        return Reading("off-by-default", CACHE_CONFIG, line)
    if default in ("None", "True"):  # None: VllmConfig turns it on where the platform supports it (CUDA, ROCm)
        return Reading("on-by-default", CACHE_CONFIG, line)
    return Unknown(f"{CACHE_CONFIG}:{line} CacheConfig.enable_extensible_kv_cache defaults to {default!r}")
