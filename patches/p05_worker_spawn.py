from compat.declaration import Patch, insert_before

from ._common import GENERATOR, SPECULATORS, TAG, V030, V04X

_EDIT = insert_before(
    '        log.info("Initializing executor...")\n'
    "        self.executor = MultiprocExecutor(vllm_config=self.vllm_config)\n",
    f"""        # {TAG}: spawn the workers unless the user chose a start method. A forked
        # worker of a process that has called torch.cuda.is_available() cannot use
        # CUDA, and vLLM's own switch to spawn (_maybe_force_spawn) only sees
        # torch.cuda.is_initialized().
        import os

        os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
""",
)

PATCH = Patch(
    id="platform.workers_spawned_after_cuda_touch",
    title="Spawn the generator's workers: a forked worker of a CUDA-touching parent cannot use CUDA",
    why=(
        "The generator builds MultiprocExecutor itself, whose workers start with VLLM_WORKER_MULTIPROC_METHOD "
        "(default 'fork'). vLLM switches to spawn only when torch.cuda.is_initialized() is true in the parent "
        "(vllm/utils/system_utils.py _maybe_force_spawn), but torch marks every later fork bad as soon as the "
        "parent has called torch.cuda.is_available() (measured on an H200 with torch 2.11: is_available() does, "
        "device_count() does not; a user's GPU check or confirm's own Hugging Face reference is enough), and "
        "is_initialized() stays False. The forked worker then dies at start with \"Cannot re-initialize CUDA "
        "in forked subprocess\". vLLM's CPU platform forces spawn itself, so only GPU runs see it."
    ),
    how=(
        "Before MultiprocExecutor is built, default VLLM_WORKER_MULTIPROC_METHOD to 'spawn' (as vLLM's own "
        "command-line entry points do); an explicit user choice is kept. Spawn re-imports the user's main "
        "module in each worker, so scripts need the usual `if __name__ == \"__main__\":` guard."
    ),
    upstream=(
        "vllm-project/vllm vllm/utils/system_utils.py _maybe_force_spawn (checks torch.cuda.is_initialized() "
        "only); vllm/entrypoints/utils.py cli_env_setup (the CLI defaults to spawn; entrypoints/common/startup.py in 0.33); vllm/envs.py "
        "VLLM_WORKER_MULTIPROC_METHOD default 'fork' (all three read in the v0.20.0 and v0.33.0 wheels)"
    ),
    removal=(
        "when speculators chooses the start method itself, or vLLM's MultiprocExecutor spawns whenever the "
        "parent has touched CUDA (not just initialised it)"
    ),
    target="speculators",
    versions={"speculators": SPECULATORS},
    requires={},
    symptom="Cannot re-initialize CUDA in forked subprocess",  # torch.cuda._lazy_init in the forked worker (seen on H200)
    edits={V030: {GENERATOR: (_EDIT,)}, V04X: {GENERATOR: (_EDIT,)}},
)
