"""tests/contract/serve/test_serve_llama.py's checks on a CUDA vLLM, once per dtype (run by ci/gpu/serve.sh).

Why a module of its own: the contract module's fixture asks for K1 (the CPU connector), which a CUDA vLLM never
needs (``k1_on`` fails there), and its spec keeps ``ServeSpec.device="cpu"``, whose float32 bound (1e-3) TF32
attention exceeds.  Here the same spec runs with the CUDA row of compat.shared.tolerance and each dtype; the
assertions are the contract module's own test functions, collected again against this module's ``result``.
"""

from __future__ import annotations

import pytest

from ci.gpu.serve_records import record
from tests.contract.serve import test_serve_llama as contract
from tests.contract.serve.conftest import model_dir, prompts, serve_lane, vllm_base, work_dir  # noqa: F401

DTYPES = ["float32", "bfloat16"]


@pytest.fixture(scope="module", params=DTYPES)
def result(request, vllm_base):  # noqa: F811 (the imported fixture)
    from compat.serve import ServeSpec, run
    from fixtures.tiny_model import build_tiny_llama

    model = build_tiny_llama(model_dir("serve-tiny-llama"))
    spec = ServeSpec(model=model, work_dir=work_dir(f"llama-{request.param}"), calls=prompts(0, 512, 64),
                     layer_ids=contract.IDS, dtype=request.param, device="cuda")
    outcome = run(spec)
    record(f"llama-{request.param}", spec, outcome)
    print(outcome.as_dict())
    return outcome


test_ok = contract.test_ok
test_every_row_equals_hf_in_ascending_id_order = contract.test_every_row_equals_hf_in_ascending_id_order
test_files_token_ids_shape_dtype = contract.test_files_token_ids_shape_dtype
test_chunked_prefill_happened = contract.test_chunked_prefill_happened
test_prefix_cache_was_hit = contract.test_prefix_cache_was_hit
test_logits_from_final_row_equal_served_prompt_logprobs = contract.test_logits_from_final_row_equal_served_prompt_logprobs
