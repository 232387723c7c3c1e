from compat.declaration import Patch, insert_before

from ._fence import MODERN, fenced

ID = "vllm.serve.deepseek_final_layer"
DEEPSEEK = "vllm/model_executor/models/deepseek_v2.py"

PATCH = Patch(
    id=ID,
    title="DeepSeek-V2 family (DeepSeek-V3, Kimi-K2/K2.5, GLM-MoE): capture the final id L before vLLM 0.25",
    why=(
        "Every speculators >= 0.5 launch appends id L = num_hidden_layers (the final pre-norm state). vLLM "
        "0.18-0.24's DeepseekV2Model.forward captures aux states only on entering a layer, so id L is never "
        "captured: N-1 rows per token, then 'expanded size' errors when the rows are stacked (vllm#46973, "
        "#46788, #48151). kimi_k25 delegates to the same DeepseekV2 language model."
    ),
    how="After the layer loop, before the final norm, append hidden_states + residual when end_layer is asked for "
        "(the code vLLM 0.25 ships).",
    upstream="vllm-project/vllm#46973 (in 0.25.0)",
    removal="when vLLM < 0.25 is no longer supported on the modern path",
    target="vllm",
    versions={"vllm": ">=0.18,<0.25", "speculators": MODERN},
    requires={},
    variant_probe="serve.capture.deepseek_v2",
    symptom=("expanded size", "N-1 hidden-state rows: the final id is missing"),
    edits={
        "stops-before-final": {
            DEEPSEEK: (
                insert_before(
                    "        hidden_states, _ = self.norm(hidden_states, residual)\n",
                    fenced(ID, "        if self.end_layer in self.aux_hidden_state_layers:\n"
                               "            aux_hidden_states.append(hidden_states + residual)\n", "        "),
                ),
            )
        }
    },
)
