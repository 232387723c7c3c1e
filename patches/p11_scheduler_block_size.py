from compat.declaration import Edit, Patch

from ._common import GENERATOR, SPECULATORS, TAG, V030

PATCH = Patch(
    id="vllm.scheduler.block_size_required",
    title="Scheduler(block_size=) is required (vLLM 0.11.1)",
    why="vLLM 0.11.1 made block_size a required Scheduler argument; speculators 0.3.0 does not pass it.",
    how="Pass the platform-resolved cache_config.block_size.",
    upstream="vllm-project/vllm v0.11.1 (v1/core/sched/scheduler.py Scheduler.__init__)",
    removal="when speculators 0.3.0 support is dropped (0.4.x passes it)",
    target="speculators",
    versions={"vllm": ">=0.11.0.dev0", "speculators": SPECULATORS},
    requires={"scheduler.block_size": ("required", "optional")},
    symptom="Scheduler.__init__() missing 1 required positional argument: 'block_size'",
    edits={
        V030: {
            GENERATOR: (
                Edit(
                    "            structured_output_manager=structured_output_manager,\n        )\n",
                    "            structured_output_manager=structured_output_manager,\n"
                    f"            block_size=self.vllm_config.cache_config.block_size,  # {TAG}: vLLM 0.11.1\n"
                    "        )\n",
                ),
            )
        }
    },
)
