from compat.declaration import Edit, Patch, insert_after

from ._common import GENERATOR, SPECULATORS, TAG, V030, V04X

_SELF = insert_after("        self.model_path = model_path\n", f"        self.dtype = dtype  # {TAG}\n")
_MODEL_CONFIG = Edit('                dtype="auto",\n', f"                dtype=self.dtype,  # {TAG}: settable, default \"auto\"\n")


def _signature(last_param: str) -> Edit:
    return Edit(
        f"        {last_param},\n    ):\n",
        f"        {last_param},\n        dtype: str = \"auto\",  # {TAG}\n    ):\n",
    )


PATCH = Patch(
    id="speculators.generator.settable_dtype",
    title="Let callers choose the model dtype (dtype='auto' runs float32 checkpoints in bf16)",
    why=(
        "The generator hard-codes ModelConfig(dtype='auto'). vLLM's 'auto' downcasts float32 checkpoints "
        "to bf16 on CPU, which vLLM 0.16's CPU attention rejects on AMX machines, and which makes any "
        "float32 comparison against Hugging Face transformers meaningless."
    ),
    how="Add a keyword-only-by-position `dtype='auto'` argument at the end of __init__ and pass it to ModelConfig.",
    upstream="vllm-project/vllm ModelConfig dtype='auto' resolution (platform-dependent downcast)",
    removal="when speculators exposes the dtype",
    target="speculators",
    versions={"speculators": SPECULATORS},
    requires={},
    symptom="VllmHiddenStatesGenerator.__init__() got an unexpected keyword argument 'dtype'",
    edits={
        V030: {GENERATOR: (_signature("tensor_parallel_size: int = 1"), _SELF, _MODEL_CONFIG)},
        V04X: {GENERATOR: (_signature("max_num_batched_tokens: int | None = None"), _SELF, _MODEL_CONFIG)},
    },
)
