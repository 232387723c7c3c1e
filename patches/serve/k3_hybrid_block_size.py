from compat.declaration import Patch, insert_after

from ._fence import MODERN, fenced

ID = "vllm.serve.hybrid_block_size"
CONNECTOR = "vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py"

PATCH = Patch(
    id=ID,
    title="vLLM 0.24: read the hidden-state block size from the hidden-state cache, not cache_config (hybrids)",
    why=(
        "vLLM 0.24 moved extraction to request_finished/get_finished but still takes the block size from "
        "cache_config.block_size. Hybrid (mamba) verifiers bump that global block size while the page-aligned "
        "hidden-state group keeps a smaller one, so the slot mapping points at the wrong slots: all-zero hidden "
        "states (or an index out of bounds on CUDA), silently (speculators#613, vllm#46301)."
    ),
    how="In register_kv_caches, once the hidden-state buffer is known, take _block_size from its block axis "
        "(shape[1] of the 0.24 per-layer view), the value 0.25 derives from the group's spec and checks.",
    upstream="vllm-project/vllm#46301 (in 0.25.0)",
    removal="when vLLM 0.24 is no longer supported on the modern path",
    target="vllm",
    versions={"vllm": ">=0.24,<0.25", "speculators": MODERN},
    requires={"serve.connector.write_mode": ("at-finish",), "serve.connector.index_axis": ("shape[1]",)},
    variant_probe="serve.connector.block_size",
    symptom="wrong hidden states: all zeros on hybrid verifiers",
    edits={
        "cache-config": {
            CONNECTOR: (
                insert_after(
                    "        self._kv_cache = kv_caches[self.cache_layers[0]]\n",
                    fenced(ID, "        self._block_size = self._kv_cache.shape[1]\n", "        "),
                ),
            )
        }
    },
)
