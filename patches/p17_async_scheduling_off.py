from compat.declaration import Patch, insert_after

from ._common import GENERATOR, SPECULATORS, TAG, V030, V04X

_EDIT = insert_after(
    "                max_num_seqs=max_num_seqs,\n",
    f"                async_scheduling=False,  # {TAG}: the generator drives one step at a time\n",
)

PATCH = Patch(
    id="vllm.scheduler_config.async_scheduling_auto_on",
    title="Turn async scheduling off: its default became None -> on (vLLM 0.14.0)",
    why=(
        "vLLM 0.14.0 changed SchedulerConfig.async_scheduling's default to None, which VllmConfig resolves "
        "to True on GPU. The generator drives schedule/execute/sample synchronously and never calls "
        "update_from_output, so async scheduling's output placeholders desynchronise its bookkeeping."
    ),
    how="Construct SchedulerConfig(async_scheduling=False).",
    upstream="vllm-project/vllm v0.14.0 (SchedulerConfig.async_scheduling default None)",
    removal="when speculators sets async_scheduling=False itself",
    target="speculators",
    versions={"vllm": ">=0.13.0.dev0", "speculators": SPECULATORS},
    requires={"scheduler_config.async_scheduling_default": ("None->auto-on",)},
    symptom="(GPU only: vLLM's CPU platform forces async_scheduling=False)",
    edits={V030: {GENERATOR: (_EDIT,)}, V04X: {GENERATOR: (_EDIT,)}},
    retired=(
        "Left out on CUDA, where vLLM 0.20 resolves async scheduling to True (observed in the engine and in every "
        "worker's GPUModelRunner.use_async_scheduling), the generator's hidden states equal the patched run's to "
        "the last digit: speculators 0.4.0.1 over 826 scheduler steps with chunked prefill (calls of 33, 11, 40 "
        "and 5 sequences at 32 tokens a step, 341+52+402+24 chunked steps), also with finished prefills kept "
        "running, and speculators 0.3.0 (calls of 1, 11, 33, 11, 33, 1) on an H200 (docs/gpu, records a, c, h). "
        "Why: the generator builds the plain Scheduler, never AsyncScheduler, and never calls update_from_output, "
        "so no output placeholder is ever scheduled; async scheduling changes only the worker's output copy, "
        "which prefill captures do not read. Re-evaluate if speculators starts decoding or builds AsyncScheduler."
    ),
)
