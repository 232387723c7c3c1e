from compat.declaration import Edit, Patch

from ._common import GENERATOR, SPECULATORS, TAG, V030

PATCH = Patch(
    id="vllm.executor.unique_reply_rank_returns_single",
    title="collective_rpc(unique_reply_rank=r) returns the reply itself, not a list (vLLM 0.11.1)",
    why=(
        "Since vLLM 0.11.1 MultiprocExecutor.collective_rpc(unique_reply_rank=0) returns rank 0's reply "
        "instead of a one-element list. speculators 0.3.0 indexes [0], which takes the first layer's "
        "tensor, and then `if not aux_hidden_states` raises "
        "'Boolean value of Tensor with more than one value is ambiguous'."
    ),
    how="Use the reply as returned.",
    upstream="vllm-project/vllm v0.11.1 (v1/executor/multiproc_executor.py collective_rpc)",
    removal="when speculators 0.3.0 support is dropped (0.4.x expects the single reply)",
    target="speculators",
    versions={"vllm": ">=0.11.0.dev0", "speculators": SPECULATORS},
    requires={"executor.collective_rpc.unique_reply_rank": ("single",)},
    symptom="Boolean value of Tensor with more than one value is ambiguous",
    edits={
        V030: {
            GENERATOR: (
                Edit(
                    "        aux_hidden_states = captured_states_list[0]\n",
                    f"        aux_hidden_states = captured_states_list  # {TAG}: single reply since vLLM 0.11.1\n",
                ),
            )
        }
    },
)
