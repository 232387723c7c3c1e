"""K4's leave-one-out proof (tests/contract/serve/test_k4_proof.py) on a CUDA vLLM 0.18-0.24, per dtype.

The contract module's two tests run unchanged (the patcher puts K4 on or off the installed vLLM; the symptom
comes from K4's declaration), with three GPU differences put into its ``spec``: MLA runs natively (the CPU
workaround ``VLLM_MLA_DISABLE=1`` is dropped; ``GPU_SERVE_MLA_DISABLE=1`` puts it back), the CUDA tolerance row,
and shorter waits (44 prompts take seconds on a GPU; a hung engine must not eat the device budget).
"""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from ci.gpu.serve_records import recorded
from tests.contract.serve import test_k4_proof as contract
from tests.contract.serve.conftest import serve_lane, vllm_base, vllm_patches, work_dir  # noqa: F401
from tests.contract.serve.test_k4_proof import needed  # noqa: F401

DTYPES = ["bfloat16", "float32"]


@pytest.fixture(autouse=True, params=DTYPES)
def on_cuda(request, monkeypatch):
    dtype, base = request.param, contract.spec
    env = dict(contract.NO_CPU_MLA) if os.environ.get("GPU_SERVE_MLA_DISABLE") == "1" else {}
    mla = "nomla" if env else "mla"

    def spec(name):
        return replace(base(name), work_dir=work_dir(f"{name}-{dtype}-{mla}"), dtype=dtype, device="cuda", env=env,
                       start_timeout_s=240.0, client_timeout_s=150.0)

    monkeypatch.setattr(contract, "spec", spec)
    monkeypatch.setattr(contract, "run", recorded(contract.run, lambda s: s.work_dir.name))
    return dtype


test_without_k4_the_final_id_is_missing = contract.test_without_k4_the_final_id_is_missing
test_with_k4_every_row_equals_hf = contract.test_with_k4_every_row_equals_hf
