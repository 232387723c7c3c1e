from compat.declaration import Edit, Patch

from ._common import GENERATOR, SPECULATORS, TAG, V04X

PATCH = Patch(
    id="speculators.generator.results_in_input_order",
    title="Return results in input order, not lexicographic request-id order (silent corruption at >= 11)",
    why=(
        "speculators 0.4.x builds its results with `for req_id in sorted(request_id_to_idx)`; ids are "
        "'req_<call>_<i>', so from 11 sequences on 'req_0_10' sorts before 'req_0_2' and result k holds "
        "another prompt's hidden states. Nothing raises: the training data is silently wrong."
    ),
    how="Iterate request ids in input-index order.",
    upstream="vllm-project/speculators (data_generation/vllm_hidden_states_generator.py generate)",
    removal="when speculators orders results by input index",
    target="speculators",
    versions={"speculators": SPECULATORS},
    requires={},
    symptom="wrong hidden states: results permuted at >= 11 sequences",
    edits={
        V04X: {
            GENERATOR: (
                Edit(
                    "        for req_id in sorted(request_id_to_idx.keys()):\n",
                    f"        # {TAG}: input order; sorted() on 'req_0_10' < 'req_0_2' permuted results\n"
                    "        for req_id in sorted(request_id_to_idx, key=request_id_to_idx.__getitem__):\n",
                ),
            )
        }
    },
)
