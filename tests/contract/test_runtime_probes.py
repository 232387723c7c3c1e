"""a. Each probe's static claim, observed on the running vLLM of this lane."""

from __future__ import annotations

import pytest

STATIC_API = [
    "request.block_hasher", "request.eos_token_id", "request.structured_output_request", "request.pooling_params",
    "scheduler.block_size", "scheduler.hash_block_size", "runner.sample_tokens_split",
    "kv_cache.block_hasher_first_param", "kv_cache.from_groups.kv_cache_specs",
    "scheduler_config.async_scheduling_default", "scheduler_config.max_model_len",
    "scheduler_config.is_encoder_decoder", "cache_config.enable_prefix_caching_default", "model.input_embeddings",
    "cache_config.kv_cache_layout_resolution", "kv_cache.module", "transformers.config_torch_annotation",
]


@pytest.mark.parametrize("probe", STATIC_API)
def test_static_probe_matches_imported_api(surface, patched_report, probe):
    assert patched_report["static_api"][probe] == surface.values[probe]


def test_request_block_hasher_claim(surface, patched_report):
    hashes = patched_report["request_hashing"]
    assert surface.values["request.block_hasher"] in ("optional", "required")
    assert hashes["with_block_hasher"] == 2  # a prompt of two full blocks
    assert hashes["without_block_hasher"] == 0  # nothing hashes it: the prefix-cache assert's cause


def test_collective_rpc_reply_shape_claim(surface, patched_report):
    assert patched_report["run"]["runtime"]["executor.collective_rpc.unique_reply_rank"] == (
        surface.values["executor.collective_rpc.unique_reply_rank"]
    )


def test_execute_model_twice_raises_exactly_when_split(surface, patched_report):
    runtime = patched_report["run"]["runtime"]
    split = surface.values["runner.sample_tokens_split"]
    assert runtime["runner.sample_tokens_split"] is split, runtime["double_execute_error"]
    if not split:
        assert runtime["double_execute_error"] is None


def test_runner_v2_default_claim(surface, patched_report):
    """vLLM's own runner choice for this model, with Triton present and no opt-in or opt-out."""
    observed = patched_report["run"]["runtime"]["runner.v2_default"]
    claimed = surface.values["runner.v2_default"]
    if claimed == "by-architecture":
        assert observed in ("default", "opt-in"), observed  # depends on whether Llama is on the list
    else:
        assert observed == claimed


def test_runner_v2_selected_claim(surface, patched_report):
    """vLLM's choice with this environment's VLLM_USE_V2_MODEL_RUNNER, Triton assumed present."""
    observed = patched_report["run"]["runtime"]["runner.v2_selected"]
    claimed = surface.values["runner.v2_selected"]
    if claimed == "by-architecture":
        assert observed in ("v2", "v1"), observed
    elif claimed == "by-platform":  # V2 where Triton is; this CPU lane has none: its workers run V1 (next test)
        assert observed == "v2", observed
    else:
        assert observed == claimed


def test_workers_really_run_the_v1_runner_here(patched_report):
    """No Triton on this CPU: whatever the default, the workers' runner keeps input_batch (V1)."""
    for facts in patched_report["run"]["runtime"]["reasons"]["workers"]:
        assert facts["use_v2_model_runner"] is False and facts["runner_has_input_batch"] is True, facts
