"""Repeated layer ids on a real ``vllm serve``: the engine dies on the first request; unique ids give HF's rows.

speculators' launch default ``[2, L//2, L-3, L]`` is ``[2, 2, 1, 4]`` for the
tiny Llama (L = 4).  vLLM sizes the extract proposer's buffer, the cache-only
layer and the connector by ``len(ids)`` (4) while the model captures a layer
once per loop step (``idx in aux_hidden_state_layers``: 3 rows), so the first
forward that extracts fails with torch's "The expanded size of the tensor (4)
must match the existing size (3)" (vLLM 0.17-0.33, v1/spec_decode/
extract_hidden_states.py ``self.hidden_states[:num_tokens] = stacked``).  One
short prompt, alone, without chunked prefill shows it: neither a batch nor
chunking is needed.  The remedy the kit prescribes, the unique ascending ids
``[1, 2, 4]``, runs under chunked prefill with every row equal to HF.
"""

from __future__ import annotations

import pytest

from compat.serve import ServeSpec, run

from .conftest import BOUNDED, model_dir, prompts, work_dir

pytestmark = [pytest.mark.serve]
REPEATED = [2, 2, 1, 4]  # speculators' [2, L//2, L-3, L] at L = 4
REMEDY = [1, 2, 4]  # unique, ascending
#: torch's broadcast error at the proposer's copy: 4 buffer rows (len(ids)), 3 captured rows (len(set(ids)))
UPSTREAM = "The expanded size of the tensor (4) must match the existing size (3)"


def _tiny_llama():
    from fixtures.tiny_model import build_tiny_llama

    return build_tiny_llama(model_dir("serve-tiny-llama"))


def test_repeated_ids_kill_the_engine_on_one_short_request(vllm_base):
    spec = ServeSpec(model=_tiny_llama(), work_dir=work_dir("layer-ids-repeated"), calls=[[[5, 6, 7, 8, 9]]],
                     layer_ids=REMEDY, max_model_len=64, max_num_batched_tokens=64, max_num_seqs=1, concurrency=1,
                     enable_chunked_prefill=False, enable_prefix_caching=False, logprobs_check=False, hf_check=False,
                     extra_args=["--enforce-eager"], **BOUNDED)
    spec.layer_ids = list(REPEATED)  # past the kit's own refusal (ServeSpec): what vLLM itself does with them
    outcome = run(spec)
    log = (spec.work_dir / "vllm-serve.log").read_text(errors="replace")
    assert outcome.verdict == "ERROR", outcome.as_dict()
    assert UPSTREAM in log, outcome.reason
    assert not list((spec.work_dir / "call0").glob("**/*.safetensors"))


def test_the_kit_refuses_repeated_ids_before_any_server():
    with pytest.raises(ValueError, match=r"repeat \[2\].*\[1, 2, 4\]"):
        ServeSpec(model=_tiny_llama(), work_dir=work_dir("layer-ids-refused"), calls=[[[5]]], layer_ids=REPEATED)
    assert not (work_dir("layer-ids-refused") / "vllm-serve.log").exists()


def test_unique_ascending_ids_give_hf_rows_under_chunked_prefill(vllm_base):
    spec = ServeSpec(model=_tiny_llama(), work_dir=work_dir("layer-ids-remedy"), calls=prompts(0, 512, 64)[:1],
                     layer_ids=REMEDY, enable_prefix_caching=False, extra_args=["--enforce-eager"], **BOUNDED)
    outcome = run(spec)
    assert outcome.verdict == "OK", f"{outcome.reason}\n{outcome.checks}"
    assert outcome.checks["chunked_prefill"]["chunked"], outcome.checks["chunked_prefill"]
    assert sorted(outcome.rows) == REMEDY and outcome.checks["hf_rows"]["ok"], outcome.checks["hf_rows"]
    assert outcome.checks["logprobs"]["compared"] > 0 and outcome.checks["logprobs"]["ok"], outcome.checks["logprobs"]
