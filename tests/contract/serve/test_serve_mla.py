"""Tiny DeepSeek-V3 and Kimi-K2.5 (MLA + MoE; fixtures/tiny_mla.py) through a real ``vllm serve``, K1 applied.

The ids are speculators' default for the model, ``[2, L//2, L-3, L]`` (L = 8:
2, 4, 5, 8), as its launch script sends them.  The final id L is captured by
the DeepSeek-V2 family only from vLLM 0.25 (#46973); Kimi-K2.5's wrapper hands
the ids to its DeepSeek-V3 language model.
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
                     calls=prompts(1, 512, 64), extra_args=["--enforce-eager"])  # no compile: start time
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


def test_files_chunking_prefix_cache_logprobs(result):
    _, outcome = result
    checks = outcome.checks
    assert checks["files"]["ok"] and checks["files"]["count"] == 44, checks["files"]
    assert checks["chunked_prefill"]["chunked"] and checks["chunked_prefill"]["ok"], checks["chunked_prefill"]
    assert checks["prefix_cache"]["hit_tokens"] > 0, checks["prefix_cache"]
    assert checks["logprobs"]["ok"] and checks["logprobs"]["compared"] > 0, checks["logprobs"]
