from compat.declaration import Edit, Patch

from ._common import GENERATOR, SPECULATORS, TAG, V030

PATCH = Patch(
    id="vllm.scheduler_config.initvars_required",
    title="SchedulerConfig InitVars is_encoder_decoder/max_model_len are required (vLLM 0.12.0)",
    why=(
        "vLLM 0.12.0 turned SchedulerConfig.is_encoder_decoder and max_model_len into InitVars "
        "without defaults; speculators 0.3.0 omits is_encoder_decoder and the config fails to build."
    ),
    how="Pass is_encoder_decoder=False (the generator only drives decoder-only models).",
    upstream="vllm-project/vllm v0.12.0 (vllm/config/scheduler.py InitVars)",
    removal="when speculators 0.3.0 support is dropped (0.4.x passes it)",
    target="speculators",
    versions={"vllm": ">=0.11.0.dev0", "speculators": SPECULATORS},
    requires={"scheduler_config.is_encoder_decoder": ("required",)},
    symptom="1 validation error for SchedulerConfig\nis_encoder_decoder\n  Field required",  # pydantic, vLLM 0.16
    edits={
        V030: {
            GENERATOR: (
                Edit(
                    "                max_num_batched_tokens=max_num_batched_tokens,\n            ),\n",
                    "                max_num_batched_tokens=max_num_batched_tokens,\n"
                    f"                is_encoder_decoder=False,  # {TAG}: required InitVar since vLLM 0.12.0\n"
                    "            ),\n",
                ),
            )
        }
    },
)
