from compat.declaration import Patch, insert_after

from ._common import GENERATOR, SPECULATORS, TAG, V04X

PATCH = Patch(
    id="speculators.generator.release_finished_prefills",
    title="Release each request once its prefill is done (starvation above max_num_seqs=32)",
    why=(
        "speculators 0.4.x aborts its requests only after the loop. A request whose prefill is done keeps "
        "its running slot, so with more than MAX_NUM_SEQS=32 sequences per call the rest are never "
        "scheduled, the loop ends with nothing scheduled, and generate() raises "
        "'Request req_<n>_32 not found in captured states'."
    ),
    how="After each step, finish (abort) every request whose prompt is fully computed.",
    upstream="vllm-project/speculators (data_generation/vllm_hidden_states_generator.py generate)",
    removal="when speculators frees finished prefills inside its loop",
    target="speculators",
    versions={"speculators": SPECULATORS},
    requires={},
    symptom="not found in captured states. Available: [",  # RuntimeError(f"Request {req_id} ...")
    edits={
        V04X: {
            GENERATOR: (
                insert_after(
                    "            model_output = self.executor.execute_model(scheduler_output)\n"
                    "            self.executor.sample_tokens(model_output)\n",
                    f"            # {TAG}: free the slots of finished prefills so waiting requests run\n"
                    "            done = [\n"
                    "                r\n"
                    "                for r in scheduler_output.num_scheduled_tokens\n"
                    "                if request_num_computed[r] >= request_id_to_prompt_len[r]\n"
                    "            ]\n"
                    "            if done:\n"
                    "                self.scheduler.finish_requests(done, RequestStatus.FINISHED_ABORTED)\n",
                ),
            )
        }
    },
)
