from compat.declaration import Edit, Patch

from ._common import GENERATOR, SPECULATORS, TAG, V030, V04X

_MEMORY = f"""        # {TAG}: the KV budget is what vLLM's workers profile for this platform
        # (CPU: VLLM_CPU_KVCACHE_SPACE; GPU: gpu_memory_utilization), not torch.cuda.
        cache_memory = min(self.executor.determine_available_memory())
"""
_CACHE_CONFIG = Edit(
    "        cache_config = CacheConfig(\n            block_size=VLLM_BLOCK_SIZE,\n",
    f"        cache_config = CacheConfig(\n            # {TAG}: block_size left to vLLM's platform (CPU %32, MLA on Hopper 64)\n",
)

PATCH = Patch(
    id="platform.block_size_and_kv_memory",
    title="Block size and KV memory from vLLM's platform, not block_size=16 and torch.cuda",
    why=(
        "The generator hard-codes block_size=16 and sizes the KV cache with torch.cuda.mem_get_info(). "
        "CPU attention needs a multiple of 32 ('No common block size for 16 (CPU_ATTN: [MultipleOf(32)])' "
        "from vLLM 0.29), vLLM forces 64 for MLA on Hopper, and torch.cuda fails without a GPU."
    ),
    how=(
        "Leave CacheConfig.block_size unset so vLLM's platform resolves it, pass the resolved "
        "cache_config.block_size wherever the constant was used, and take the KV budget from "
        "executor.determine_available_memory() like EngineCore does."
    ),
    upstream="vllm-project/speculators (generator constants); vLLM platform check_and_update_config",
    removal="when speculators stops hard-coding VLLM_BLOCK_SIZE and mem_get_info",
    target="speculators",
    versions={"speculators": SPECULATORS},
    requires={},
    symptom=(
        "Torch not compiled with CUDA enabled",  # 0.3.0: torch.cuda.mem_get_info on a CPU build
        "Found no NVIDIA driver on your system",  # 0.3.0: the same on a CUDA build of torch without a GPU
        "assert num_gpu_blocks is not None and num_gpu_blocks > 0",  # 0.4.x: speculators' mem_get_info() is (0, 0) off-GPU -> 0 KV blocks
        "No common block size for 16 (CPU_ATTN: [MultipleOf(32)])",  # block_size=16 on CPU attention (vLLM >= 0.29)
    ),
    edits={
        V030: {
            GENERATOR: (
                _CACHE_CONFIG,
                Edit(
                    "        free_memory, _ = torch.cuda.mem_get_info()\n"
                    "        cache_memory = int(free_memory * gpu_memory_utilization * CACHE_MEMORY_FRACTION)\n",
                    _MEMORY,
                ),
            )
        },
        V04X: {
            GENERATOR: (
                _CACHE_CONFIG,
                Edit(
                    "        free_memory, _ = mem_get_info()\n"
                    "        cache_memory = int(free_memory * gpu_memory_utilization * CACHE_MEMORY_FRACTION)\n",
                    _MEMORY,
                ),
                Edit(
                    "            block_size=VLLM_BLOCK_SIZE,\n        )\n\n        log.info(\"Initializing KV cache",
                    "            block_size=self.vllm_config.cache_config.block_size,  # "
                    + TAG
                    + ": platform-resolved\n        )\n\n        log.info(\"Initializing KV cache",
                ),
            )
        },
    },
)
