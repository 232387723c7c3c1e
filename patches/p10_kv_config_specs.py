from compat.declaration import Edit, Patch

from ._common import GENERATOR, SPECULATORS, TAG, V030

PATCH = Patch(
    id="vllm.kv_config.from_groups_drops_kv_cache_specs",
    title="get_kv_cache_config_from_groups() no longer takes kv_cache_specs (vLLM 0.12.0)",
    why=(
        "vLLM 0.12.0 dropped the kv_cache_specs parameter of get_kv_cache_config_from_groups; "
        "speculators 0.3.0 still passes it and dies right after the model load."
    ),
    how="Stop passing kv_cache_specs= (the groups already carry the specs).",
    upstream="vllm-project/vllm v0.12.0 (kv_cache_utils.get_kv_cache_config_from_groups signature)",
    removal="when kv_cache.from_groups.kv_cache_specs is required on every supported vLLM (i.e. never again), or speculators 0.3.0 support is dropped",
    target="speculators",
    versions={"vllm": ">=0.11.0.dev0", "speculators": SPECULATORS},
    requires={"kv_cache.from_groups.kv_cache_specs": ("absent",)},
    symptom="get_kv_cache_config_from_groups() got an unexpected keyword argument 'kv_cache_specs'",
    edits={
        V030: {
            GENERATOR: (
                Edit(
                    "            kv_cache_specs=kv_cache_spec,\n",
                    f"            # {TAG}: kv_cache_specs= was removed in vLLM 0.12.0\n",
                ),
            )
        }
    },
)
