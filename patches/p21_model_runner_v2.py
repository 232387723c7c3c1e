from compat.declaration import Edit, Patch
from compat.probes.runner_v2 import ASSUMED_UNSET, V2_RUNS

from ._common import SPECULATORS, TAG, V04X, WORKER

PATCH = Patch(
    id="vllm.runner.v2_has_no_input_batch",
    title="Order captured requests without model_runner.input_batch (Model Runner V2: opt-in from 0.12, default from 0.29)",
    why=(
        "speculators 0.4.x orders each step's captures by model_runner.input_batch.req_id_to_index. "
        "Model Runner V2 (opt-in with VLLM_USE_V2_MODEL_RUNNER=1 from 0.12, default by architecture from 0.22, "
        "for all models from 0.29) keeps no persistent input_batch, so capture fails with "
        "\"object has no attribute 'input_batch'\". Whether V2 runs is read from vLLM's source and from "
        "VLLM_USE_V2_MODEL_RUNNER where compat.apply runs (set it there as for vLLM); a plan for a wheel "
        "assumes it unset."
    ),
    how=(
        "Use input_batch when the runner has one; otherwise order the step as V2 does: with its own "
        "sort_batch_req_ids (decode-like requests first) from 0.28, and before that as 0.12-0.27's "
        "V2 runner does inline, sorted(num_tokens_per_req, key=num_tokens_per_req.get). On an H200 with "
        "vLLM 0.20 the 0.28-only import failed (ImportError: cannot import name 'sort_batch_req_ids'), "
        "docs/gpu/README.md."
    ),
    upstream=(
        "vllm-project/vllm v0.12.0 (v1/worker/gpu/model_runner.py, VLLM_USE_V2_MODEL_RUNNER); "
        "v0.22-v0.29 (VllmConfig.use_v2_model_runner, Model Runner V2 default)"
    ),
    removal=(
        "when speculators stops reading model_runner.input_batch. Not runnable on CPU (V2 needs Triton); "
        "ran on an H200 with vLLM 0.20 and VLLM_USE_V2_MODEL_RUNNER=1 (docs/gpu, sets b and e)"
    ),
    target="speculators",
    # coarse lower bound: the V2 runner and its opt-in first shipped in 0.12.0 (not in 0.11.x)
    versions={"vllm": ">=0.11.0.dev0", "speculators": SPECULATORS},
    requires={"runner.v2_selected": tuple(v + s for v in V2_RUNS for s in ("", ASSUMED_UNSET))},
    symptom="AttributeError: 'GPUModelRunner' object has no attribute 'input_batch'",
    edits={
        V04X: {
            WORKER: (
                Edit(
                    "            input_batch = self.model_runner.input_batch  # type: ignore[attr-defined]\n"
                    "            sorted_metadata = sorted(\n"
                    "                metadata.items(),\n"
                    "                key=lambda item: input_batch.req_id_to_index.get(item[0], float(\"inf\")),\n"
                    "            )\n",
                    f"            # {TAG}: Model Runner V2 has no persistent input_batch\n"
                    "            input_batch = getattr(self.model_runner, \"input_batch\", None)\n"
                    "            if input_batch is not None:\n"
                    "                sorted_metadata = sorted(\n"
                    "                    metadata.items(),\n"
                    "                    key=lambda item: input_batch.req_id_to_index.get(item[0], float(\"inf\")),\n"
                    "                )\n"
                    "            else:\n"
                    "                try:\n"
                    "                    from vllm.v1.worker.gpu.model_runner import sort_batch_req_ids\n"
                    "                except ImportError:  # vLLM < 0.28: V2 orders a step by scheduled tokens only\n"
                    "                    order = sorted(metadata, key=metadata.get)\n"
                    "                else:\n"
                    "                    order = sort_batch_req_ids(\n"
                    "                        dict(metadata), {}, getattr(self.model_runner, \"decode_query_len\", 1)\n"
                    "                    )\n"
                    "                sorted_metadata = [(r, metadata[r]) for r in order]\n",
                ),
            )
        }
    },
)
