from compat.declaration import Edit, Patch, insert_after

from ._common import GENERATOR, SPECULATORS, TAG, V030

_IMPORTS = f"""from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

try:  # {TAG}: get_hash_fn_by_name moved to vllm.utils.hashing in vLLM 0.11.1
    from vllm.utils.hashing import get_hash_fn_by_name
except ImportError:
    from vllm.utils import get_hash_fn_by_name
"""

_HASHER = f"""
        # {TAG}: Requests need a block hasher (as EngineCore builds one) or the
        # KV manager trips "assert len(request.block_hashes) >= num_full_blocks".
        caching_hash_fn = get_hash_fn_by_name(
            self.vllm_config.cache_config.prefix_caching_hash_algo
        )
        init_none_hash(caching_hash_fn)
        self.block_hasher = get_request_block_hasher(
            self.vllm_config.cache_config.block_size, caching_hash_fn
        )
"""

PATCH = Patch(
    id="vllm.request.block_hasher_and_no_prefix_cache",
    title="Requests carry a block hasher, prefix caching off (vLLM 0.12.0 default on)",
    why=(
        "vLLM 0.12.0 made CacheConfig.enable_prefix_caching default to True, so Requests built without "
        "block_hasher hit the block_hashes assert in the KV cache manager; and prefix-cache hits skip "
        "the forward pass for cached tokens, silently dropping their hidden states (speculators #279)."
    ),
    how=(
        "Build the block hasher as EngineCore does (init_none_hash + get_request_block_hasher), pass it "
        "as Request(block_hasher=), and construct CacheConfig(enable_prefix_caching=False). "
        "The hasher's first argument is passed positionally, so the 0.24.0 rename "
        "(block_size -> hash_block_size) needs no edit."
    ),
    upstream="vllm-project/vllm v0.12.0 (CacheConfig.enable_prefix_caching=True); vllm-project/speculators#279",
    removal="when speculators 0.3.0 support is dropped (0.4.x builds the hasher and disables prefix caching)",
    target="speculators",
    versions={"vllm": ">=0.11.0.dev0", "speculators": SPECULATORS},
    requires={
        "cache_config.enable_prefix_caching_default": ("True",),
        "request.block_hasher": ("optional", "required"),
    },
    symptom=(
        "assert len(request.block_hashes) >= num_full_blocks",  # vLLM 0.12-0.23
        "assert len(block_hashes) >= num_full_blocks",  # vLLM 0.24-0.25 (hashes regrouped per block size first)
        "in cache_full_blocks\n    block_hash = new_block_hashes[i]",  # later: IndexError in BlockPool.cache_full_blocks
    ),
    edits={
        V030: {
            GENERATOR: (
                insert_after("from vllm.sampling_params import SamplingParams\n", _IMPORTS),
                insert_after("        self.executor.initialize_from_config(kv_cache_configs)\n", _HASHER),
                Edit(
                    "            gpu_memory_utilization=gpu_memory_utilization,\n        )\n",
                    "            gpu_memory_utilization=gpu_memory_utilization,\n"
                    f"            enable_prefix_caching=False,  # {TAG}: cache hits would skip hidden states\n"
                    "        )\n",
                ),
                Edit(
                    "                arrival_time=INITIAL_ARRIVAL_TIME,\n            )\n",
                    "                arrival_time=INITIAL_ARRIVAL_TIME,\n"
                    f"                block_hasher=self.block_hasher,  # {TAG}\n"
                    "            )\n",
                ),
            )
        }
    },
)
