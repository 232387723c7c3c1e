from compat.declaration import Patch, insert_after

from ._common import GENERATOR, SPECULATORS, TAG, V030, V04X

_RESOLVE = f"""
        # {TAG}: since vLLM 0.29 the KV cache layout must be resolved once (as
        # EngineCore does) before initialize_from_config.
        from vllm.v1.attention.backends.utils import resolve_kv_cache_layout

        kv_layout = resolve_kv_cache_layout(
            self.vllm_config,
            self.executor.get_supported_kv_cache_layouts(),
            list(kv_cache_spec.values()),
        )
        self.executor.set_kv_cache_layout(kv_layout.name)
"""
_EDITS = (
    insert_after("        kv_cache_groups = _get_kv_cache_groups_uniform_spec(kv_cache_spec)\n", _RESOLVE),
    insert_after(
        "        self.vllm_config.cache_config.num_gpu_blocks = kv_cache_config.num_blocks\n",
        f"        kv_cache_config.kv_cache_layout = self.vllm_config.cache_config.kv_cache_layout  # {TAG}\n",
    ),
)

PATCH = Patch(
    id="vllm.cache_config.kv_cache_layout_resolution",
    title="Resolve the KV cache layout before initialize_from_config (vLLM 0.29)",
    why=(
        "vLLM 0.29 resolves the KV cache layout once in EngineCore; a generator that builds the engine "
        "by hand gets 'ValueError: KV cache layout has not been resolved yet' from initialize_from_config."
    ),
    how="Call resolve_kv_cache_layout + executor.set_kv_cache_layout and copy the layout into the KV cache config.",
    upstream="vllm-project/vllm v0.29.0 (CacheConfig.kv_cache_layout, resolve_kv_cache_layout)",
    removal="when speculators resolves the layout itself",
    target="speculators",
    versions={"vllm": ">=0.28.0.dev0", "speculators": SPECULATORS},
    requires={"cache_config.kv_cache_layout_resolution": ("required",)},
    symptom=(
        "KV cache layout has not been resolved yet; it is resolved once by the engine core "
        "(resolve_kv_cache_layout) unless explicitly set by the user."
    ),
    edits={V030: {GENERATOR: _EDITS}, V04X: {GENERATOR: _EDITS}},
)
