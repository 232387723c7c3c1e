from compat.declaration import Edit, Patch

from ._common import GENERATOR, SPECULATORS, TAG, V030

PATCH = Patch(
    id="vllm.runner.execute_model_then_sample_tokens",
    title="Every execute_model() that returns None is followed by sample_tokens() (vLLM 0.11.1)",
    why=(
        "vLLM 0.11.1 split sampling out of execute_model: it returns None and the runner refuses the next "
        "step with 'State error: sample_tokens() must be called after execute_model() returns None.'"
    ),
    how="Call executor.sample_tokens(None) after each execute_model() that returned None.",
    upstream="vllm-project/vllm v0.11.1 (v1/worker/gpu_model_runner.py execute_model/sample_tokens)",
    removal="when speculators 0.3.0 support is dropped (0.4.x pairs them)",
    target="speculators",
    versions={"vllm": ">=0.11.0.dev0", "speculators": SPECULATORS},
    requires={"runner.sample_tokens_split": (True,)},
    symptom="sample_tokens() must be called after execute_model() returns None",
    edits={
        V030: {
            GENERATOR: (
                Edit(
                    "            self.executor.execute_model(scheduler_output)\n",
                    "            model_output = self.executor.execute_model(scheduler_output)\n"
                    f"            if model_output is None:  # {TAG}: vLLM 0.11.1 split sampling out\n"
                    "                self.executor.sample_tokens(None)\n",
                ),
            )
        }
    },
)
