from compat.declaration import Patch, insert_after, insert_before

from ._fence import fenced

ID = "hs_connectors.serve.kv_layout"
MOONCAKE = "hs_connectors/mooncake_hidden_states_connector.py"
VLLM = "vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector"

PATCH = Patch(
    id=ID,
    title="hs-connectors 0.7.0 Mooncake connector on vLLM >= 0.29: read the KV cache the way vLLM lays it out",
    why=(
        "vLLM 0.29 changed the per-layer KV view to [blocks, ids, block_size, hidden] (LBNHC). hs-connectors "
        "0.7.0 keeps its own extract_from_kv_cache with block_size = shape[1] and asks for 'NHD', so it reads "
        "the number of ids as the block size: wrong slots and a wrong shape, silently (hs-connectors 0.8.0 "
        "delegates both to vLLM, #1072)."
    ),
    how="Rebind the module's extract_from_kv_cache to vLLM's, and have get_required_kvcache_layout return "
        "ExampleHiddenStatesConnector's (what hs-connectors 0.8.0 does).",
    upstream="vllm-project/speculators#1072 (hs-connectors 0.8.0)",
    removal="when hs-connectors 0.7.0 is no longer supported",
    target="hs_connectors",
    versions={"vllm": ">=0.29"},
    requires={"serve.connector.index_axis": ("shape[2]",)},
    variant_probe="serve.hs_connectors.mooncake.index_axis",
    symptom="wrong hidden states: slots read with the number of ids as block size",
    edits={
        "shape[1]": {
            MOONCAKE: (
                insert_before(
                    "\n\ndef sanitize_key(",
                    "\n" + fenced(ID, f"from {VLLM} import (  # noqa: E402\n"
                                      "    ExampleHiddenStatesConnector as _VllmConnector,\n"
                                      "    extract_from_kv_cache,\n)\n", ""),
                ),
                insert_after(
                    "                \"get_required_kvcache_layout should not be called on the base class\"\n"
                    "            )\n",
                    fenced(ID, "        return _VllmConnector.get_required_kvcache_layout(vllm_config)\n", "        "),
                ),
            )
        }
    },
)
