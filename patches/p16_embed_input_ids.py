from compat.declaration import Edit, Patch

from ._common import SPECULATORS, TAG, V030, WORKER

PATCH = Patch(
    id="vllm.model.embed_input_ids",
    title="Models embed with embed_input_ids(), not get_input_embeddings() (vLLM 0.11.1)",
    why=(
        "vLLM 0.11.1 renamed the models' get_input_embeddings to embed_input_ids; speculators 0.3.0's "
        "patched forward calls the old name and every worker dies on the first step with "
        "\"'LlamaModel' object has no attribute 'get_input_embeddings'\"."
    ),
    how="Call embed_input_ids.",
    upstream="vllm-project/vllm v0.11.1 (model_executor/models: embed_input_ids)",
    removal="when speculators 0.3.0 support is dropped (0.4.x uses embed_input_ids)",
    target="speculators",
    versions={"vllm": ">=0.11.0.dev0", "speculators": SPECULATORS},
    requires={"model.input_embeddings": ("embed_input_ids",)},
    symptom="object has no attribute 'get_input_embeddings'",
    edits={
        V030: {
            WORKER: (
                Edit(
                    "            else self.get_input_embeddings(input_ids)\n",
                    f"            else self.embed_input_ids(input_ids)  # {TAG}: renamed in vLLM 0.11.1\n",
                ),
            )
        }
    },
)
