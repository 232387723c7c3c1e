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
        "update_from_output. With one pipeline stage that changes nothing (left out on an H200, vLLM 0.20, the "
        "hidden states equalled the patched run's to the last digit, docs/gpu records a, c, h); at pipeline-parallel "
        "size 2 with async scheduling on, a call of 11 sequences came back wrong on every layer (4.0-7.4 x each "
        "layer's mean|h|, one sequence alone was right), and with async scheduling off it matched HF (6e-3)."
    ),
    how="Construct SchedulerConfig(async_scheduling=False).",
    upstream="vllm-project/vllm v0.14.0 (SchedulerConfig.async_scheduling default None)",
    removal=(
        "when speculators sets async_scheduling=False itself, or when a PP=2 run on CUDA with async scheduling on "
        "matches HF (tests/contract/test_parallel.py proves it there; an earlier retirement rested on PP=1 runs only)"
    ),
    user_proof=(
        "the bug needs pipeline-parallel size > 1, which compat confirm cannot run (speculators' generator takes no "
        "pipeline_parallel_size: confirm exits 2). Prove it on your install from a checkout of this kit, in the "
        "environment that has vLLM and speculators, with two CPU cores or two GPUs: "
        "python -m pytest -p no:cacheprovider -m parallel tests/contract/test_parallel.py -k pp2"
    ),
    target="speculators",
    versions={"vllm": ">=0.13.0.dev0", "speculators": SPECULATORS},
    requires={"scheduler_config.async_scheduling_default": ("None->auto-on",)},
    # GPU only (vLLM's CPU platform forces async_scheduling=False), and only at pipeline-parallel size > 1
    symptom="wrong hidden states: at pipeline-parallel size 2 with async scheduling on, calls of several sequences",
    edits={V030: {GENERATOR: (_EDIT,)}, V04X: {GENERATOR: (_EDIT,)}},
)
