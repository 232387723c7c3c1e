from compat.declaration import Edit, Patch

from ._common import GENERATOR, SPECULATORS, TAG, V030

PATCH = Patch(
    id="speculators.generator.keep_chunked_prefills",
    title="Do not abort a request after its first prefill chunk (silent corruption with chunked prefill)",
    why=(
        "speculators 0.3.0 aborts every scheduled request after each step. When a prompt is longer than "
        "the step's token budget (chunked prefill), its remaining chunks never run, so the captured "
        "tensors are shorter than the prompts and every later sequence is sliced at the wrong offset."
    ),
    how="Abort a request only once the scheduler has computed its whole prompt.",
    upstream="vllm-project/speculators 0.4.0 (tracks prefill progress per request)",
    removal="when speculators 0.3.0 support is dropped",
    target="speculators",
    versions={"speculators": SPECULATORS},
    requires={},
    symptom="wrong hidden states: chunked prompts truncated",
    edits={
        V030: {
            GENERATOR: (
                Edit(
                    "            for req_id in scheduler_output.num_scheduled_tokens:\n"
                    "                self.scheduler.finish_requests([req_id], RequestStatus.FINISHED_ABORTED)\n",
                    "            for req_id in scheduler_output.num_scheduled_tokens:\n"
                    f"                # {TAG}: only once the whole prompt is computed (chunked prefill)\n"
                    "                request = self.scheduler.requests.get(req_id)\n"
                    "                if request is None or request.num_computed_tokens >= request.num_prompt_tokens:\n"
                    "                    self.scheduler.finish_requests([req_id], RequestStatus.FINISHED_ABORTED)\n",
                ),
            )
        }
    },
)
