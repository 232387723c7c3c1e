from compat.declaration import Patch, insert_before

from ._common import GENERATOR, SPECULATORS, TAG, V030, V04X

_EDIT = insert_before(
    "        self.vllm_config = self._create_vllm_config(\n",
    f"""        # {TAG}: on vLLM's CPU platform give the workers every core. Auto thread
        # binding keeps cores free for the engine's busy-looping scheduler process
        # (from vLLM 0.20 one per local worker: 1 of 2 cores on a 2-core machine);
        # here the caller's process only schedules and copies results while the
        # workers compute. A VLLM_CPU_NUM_OF_RESERVED_CPU the user set is kept, an
        # explicit VLLM_CPU_OMP_THREADS_BIND list never reads it, and GPUs ignore it.
        import os

        from vllm.platforms import current_platform

        if current_platform.is_cpu():
            os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
""",
)

PATCH = Patch(
    id="platform.cpu_workers_bind_every_core",
    title="CPU: bind the generator's workers to every core, none reserved for an idle driver process",
    why=(
        "With vLLM's default VLLM_CPU_OMP_THREADS_BIND=auto, the CPU platform reserves cores for the engine's "
        "scheduler process, which in vLLM's own engine busy-loops (vllm/utils/ompmultiprocessing.py "
        "OMPProcessManager, from 0.20.0: local_world_size cores on x86/ARM/RISC-V, 'TODO: make scheduler proc "
        "sleep when idle'; up to 0.19.1 cpu_worker.py reserved 1 core only when world_size > 1). The generator "
        "has no EngineCore: its scheduler runs in the caller's process between steps and waits while the workers "
        "compute. So on vllm-cpu 0.32.0 on 2 cores its single worker runs 1 OpenMP thread bound to core 0 and "
        "core 1 idles: extraction ran at 0.92x of the best of vLLM's extract_hidden_states and HF batched, "
        "1.02x with both cores bound (benchmarks/extract_throughput.py, hidden 512, 8 layers, 64 x 256 tokens)."
    ),
    how=(
        "Before the vLLM config and MultiprocExecutor are built, on vLLM's CPU platform only (current_platform."
        "is_cpu()), default VLLM_CPU_NUM_OF_RESERVED_CPU to 0, vLLM's own knob for the reservation: auto binding "
        "then gives each rank every core of its NUMA node (vLLM's own split across TP/PP ranks, unchanged). A "
        "value the user set is kept; an explicit VLLM_CPU_OMP_THREADS_BIND list or 'nobind' does not read it. "
        "vLLM >= 0.20 logs a warning that the value is below its minimum. Like p05's start method, the default "
        "stays in this process's environment, so a vLLM engine started later from the same process inherits it."
    ),
    upstream=(
        "vllm-project/vllm vllm/utils/ompmultiprocessing.py OMPProcessManager.__init__ / _get_autobind_cpu_ids "
        "(reserve_cpu_num = local_world_size on x86, from v0.20.0; read in the v0.20.0, v0.32.0 and v0.33.0 "
        "wheels); vllm/v1/worker/cpu_worker.py _get_autobind_cpu_ids (v0.11.0-v0.19.1: 0 reserved at "
        "world_size 1); vllm/envs.py VLLM_CPU_NUM_OF_RESERVED_CPU (v0.11.0 to v0.33.0)"
    ),
    removal=(
        "when vLLM's auto binding stops reserving cores for a driver that sleeps while the workers compute "
        "(its TODO), or speculators sets the reservation itself"
    ),
    target="speculators",
    versions={"speculators": SPECULATORS},
    requires={},
    # Throughput only; the hidden states are right either way.  vLLM's own log line (0.32.0) shows it.
    symptom="slower extraction: vLLM logs 'OpenMP thread binding info' with local_rank=0, core ids=[0] and "
            "reserved_cpus=[1] on 2 cores (the worker runs 1 thread)",
    edits={V030: {GENERATOR: (_EDIT,)}, V04X: {GENERATOR: (_EDIT,)}},
)
