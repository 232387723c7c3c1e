"""tests/contract/serve/test_contract_cases.py's cases on a CUDA vLLM: the runner users run (run by ci/gpu/serve.sh).

Why a module of its own: the contract module's servers are CPU ones (``--enforce-eager``, ``device="cpu"``, whose
float32 bound TF32 attention exceeds).  Here the same configurations start compiled (CUDA graphs where the runner
captures them), judged by the CUDA row of compat.shared.tolerance, once per dtype; the assertions are the contract
module's own test functions, collected again against this module's fixtures.  Each server's runner (V1 or V2) is
read from its log and written with its results (``$GPU_SERVE_RECORDS``: ci/gpu/serve_records.py; and
``<cache>/serve-runs/records/gpu-serve/contract-cases-*.json``).  vLLM 0.34.0 has only Model Runner V2; 0.26.0
runs the V1 runner on the tiny Llama.

``GPU_CASES_DTYPES`` (default ``bfloat16,float32``) picks the dtypes.  The TP=2 case needs two GPUs: on one it is
skipped with that reason (a skip, never a pass); on a two-GPU machine it runs (``-k tp2`` alone).
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from ci.gpu.serve_records import record
from tests.contract.serve import test_contract_cases as contract
from tests.contract.serve.conftest import serve_lane, vllm_base  # noqa: F401

DTYPES = [d for d in os.environ.get("GPU_CASES_DTYPES", "bfloat16,float32").split(",") if d]


def gpus() -> int:
    """The GPUs nvidia-smi lists (CUDA is not initialised in this process: the servers' workers use it)."""
    if not shutil.which("nvidia-smi"):
        return 0
    proc = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    return sum(1 for line in proc.stdout.splitlines() if line.startswith("GPU "))


@pytest.fixture(scope="module", params=DTYPES)
def dtype(request):
    return request.param


@pytest.fixture(scope="module")
def chunked(vllm_base, dtype):  # noqa: F811 (the imported fixture)
    return contract.run_config("chunked", device="cuda", dtype=dtype, record=record)


@pytest.fixture(scope="module")
def unchunked(vllm_base, dtype, chunked):  # noqa: F811
    return contract.run_config("unchunked", device="cuda", dtype=dtype, record=record)


@pytest.fixture(scope="module")
def refs(chunked):
    return contract.hf_refs(chunked.spec)


@pytest.fixture(scope="module")
def tp2(vllm_base, dtype):  # noqa: F811
    if gpus() < 2:
        pytest.skip(f"TP=2 needs two GPUs; nvidia-smi lists {gpus()}")
    return contract.run_config("tp2", device="cuda", dtype=dtype, record=record)


test_the_runner_is_read_from_the_server_log = contract.test_the_runner_is_read_from_the_server_log
test_a_prefix_cache_hit_keeps_every_row = contract.test_a_prefix_cache_hit_keeps_every_row
test_b_a_cache_salt_is_never_served_from_another_salts_cache = \
    contract.test_b_a_cache_salt_is_never_served_from_another_salts_cache
test_c_chunked_prefill_on_and_off_give_the_same_rows = contract.test_c_chunked_prefill_on_and_off_give_the_same_rows
test_d_a_repeated_prompt_from_the_cache_gives_the_same_rows = \
    contract.test_d_a_repeated_prompt_from_the_cache_gives_the_same_rows
test_speculators_generate_offline_data_from_a_warm_cache_gives_the_same_rows = \
    contract.test_speculators_generate_offline_data_from_a_warm_cache_gives_the_same_rows
test_e_tp2_rank_zero_alone_writes_the_same_rows = contract.test_e_tp2_rank_zero_alone_writes_the_same_rows
