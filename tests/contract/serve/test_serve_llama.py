"""Tiny Llama through a real ``vllm serve`` + speculators' ``generate-offline-data``, K1 applied.

Layer ids are given out of order and with the embedding (0) and the final id (L):
the file's rows must come in ascending id order, id k equal to HF
``hidden_states[k]`` and id L to the input of the final norm.
"""

from __future__ import annotations

import pytest

from compat.serve import ServeSpec, run

from .conftest import model_dir, prompts, work_dir

pytestmark = [pytest.mark.serve]
IDS = [4, 0, 2, 1, 3]  # L = 4


@pytest.fixture(scope="module")
def result(k1_on, launch):
    from fixtures.tiny_model import build_tiny_llama

    model = build_tiny_llama(model_dir("serve-tiny-llama"))
    spec = ServeSpec(model=model, work_dir=work_dir("llama"), calls=prompts(0, 512, 64),
                     layer_ids=IDS, **launch.options)
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
