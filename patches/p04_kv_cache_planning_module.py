from compat.declaration import Edit, Patch

from ._common import GENERATOR, SPECULATORS, TAG, V030, V04X

_PLANNING = (
    f"from vllm.v1.core.kv_cache_planning import (  # {TAG}: moved in vLLM 0.33.0\n"
    "    _get_kv_cache_groups_uniform_spec,\n"
    "    get_kv_cache_config_from_groups,\n"
    "    unify_hybrid_kv_cache_specs,\n"
    ")\n"
)

PATCH = Patch(
    id="vllm.kv_cache.planning_module",
    title="KV planning functions moved to vllm.v1.core.kv_cache_planning without re-export (vLLM 0.33.0)",
    why=(
        "vLLM 0.33.0 moved get_kv_cache_config_from_groups, _get_kv_cache_groups_uniform_spec and "
        "unify_hybrid_kv_cache_specs to vllm.v1.core.kv_cache_planning and kept no alias, so importing the "
        "generator fails with an ImportError before anything runs."
    ),
    how="Import the three from kv_cache_planning; the block-hasher helpers stay in kv_cache_utils.",
    upstream="vllm-project/vllm v0.33.0 (vllm/v1/core/kv_cache_planning.py)",
    removal="when speculators imports from kv_cache_planning. UNTESTED at runtime here: no CPU build of 0.33 exists",
    target="speculators",
    versions={"vllm": ">=0.32.0.dev0", "speculators": SPECULATORS},
    requires={"kv_cache.module": ("vllm.v1.core.kv_cache_planning",)},
    symptom="cannot import name 'get_kv_cache_config_from_groups' from 'vllm.v1.core.kv_cache_utils'",
    edits={
        V030: {
            GENERATOR: (
                Edit(
                    "from vllm.v1.core.kv_cache_utils import (\n"
                    "    _get_kv_cache_groups_uniform_spec,\n"
                    "    get_kv_cache_config_from_groups,\n"
                    "    unify_hybrid_kv_cache_specs,\n"
                    ")\n",
                    _PLANNING,
                ),
            )
        },
        V04X: {
            GENERATOR: (
                Edit(
                    "from vllm.v1.core.kv_cache_utils import (\n"
                    "    _get_kv_cache_groups_uniform_spec,\n"
                    "    get_kv_cache_config_from_groups,\n"
                    "    get_request_block_hasher,\n"
                    "    init_none_hash,\n"
                    "    unify_hybrid_kv_cache_specs,\n"
                    ")\n",
                    _PLANNING + "from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash\n",
                ),
            )
        },
    },
)
