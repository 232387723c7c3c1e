from compat.declaration import Edit, Patch, insert_after

from ._common import GENERATOR, SPECULATORS, TAG, V030, V04X

_HELPER = f'''

def _sampling_params_with_eos(eos_token_id):
    """{TAG}: vLLM 0.17.0 reads EOS from SamplingParams, no longer from Request."""
    params = SamplingParams(max_tokens=MAX_DECODE_TOKENS, temperature=SAMPLING_TEMPERATURE)
    params.update_from_generation_config({{}}, eos_token_id)
    return params
'''
_EDITS = (
    insert_after("log = PipelineLogger(__name__)\n", _HELPER),
    Edit(
        "                sampling_params=SamplingParams(\n"
        "                    max_tokens=MAX_DECODE_TOKENS, temperature=SAMPLING_TEMPERATURE\n"
        "                ),\n",
        "                sampling_params=_sampling_params_with_eos(self.tokenizer.eos_token_id),\n",
    ),
    Edit(
        "                eos_token_id=self.tokenizer.eos_token_id,\n",
        f"                # {TAG}: eos_token_id moved to SamplingParams in vLLM 0.17.0\n",
    ),
)

PATCH = Patch(
    id="vllm.request.eos_token_id_to_sampling_params",
    title="EOS moves from Request(eos_token_id=) to SamplingParams (vLLM 0.17.0)",
    why="vLLM 0.17.0 removed Request's eos_token_id parameter; both generators pass it and fail at the first request.",
    how="Drop the argument and set the EOS on SamplingParams with update_from_generation_config().",
    upstream="vllm-project/vllm v0.17.0 (v1/request.py Request.__init__)",
    removal="when speculators builds Requests without eos_token_id",
    target="speculators",
    versions={"vllm": ">=0.16.0.dev0", "speculators": SPECULATORS},
    requires={"request.eos_token_id": ("absent",)},
    symptom="Request.__init__() got an unexpected keyword argument 'eos_token_id'",
    edits={V030: {GENERATOR: _EDITS}, V04X: {GENERATOR: _EDITS}},
)
