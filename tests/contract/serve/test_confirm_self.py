"""``compat confirm --path serve --reference self`` on a real ``vllm serve``: no HF model, no second engine.

Verifier: a tiny Llama whose RMSNorm weights are spread (1 +- 0.5, so a post-norm final row moves the logits)
and whose ``max_position_embeddings`` is 256 (under confirm's default of 512).  The user's command line, run as a
subprocess, with the options that matter forwarded:

* no ``--max-model-len``: the server gets 256, the model's own limit (vLLM's config line says so), and every
  prompt fits;
* ``--max-batched-tokens 48`` and ``--gpu-memory-utilization 0.1`` reach vLLM's resolved config;
* OK, exit 0: the final row's logits equal the server's prompt_logprobs for every file (44), every file equals
  its prompt served alone (the twin), and layers recomputed from the checkpoint's weights between ids 1..4 (and
  the embedding to id 1) equal the captured next id; no ``hf_rows``;
* compat.serve.manifest's manifest is written beside each client run's files;
* ``--max-model-len 512`` on that model: ERROR, exit 1, and the first line is vLLM's reason ("User-specified
  max_model_len (512) is greater than the derived max_model_len ..."), not pydantic's header.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from . import records
from .conftest import model_dir
from .test_confirm_serve_cli import confirm

pytestmark = [pytest.mark.serve]


@pytest.fixture(scope="module", autouse=True)
def newest_serve_lane():
    records.only_in_newest_serve_lane("confirm --reference self's CLI contract")


def spread_llama() -> str:
    from fixtures.tiny_model import build_tiny_llama

    return build_tiny_llama(model_dir("serve-tiny-llama-spread-256"), max_positions=256, norm_spread=0.5)


@pytest.fixture(scope="module")
def selfrun(vllm_base):
    proc, doc = confirm(spread_llama(), "confirm-self", "--reference", "self", "--layers", "1,2,3,4",
                        "--max-batched-tokens", "48", "--gpu-memory-utilization", "0.1")
    records.save("confirm-self-llama-spread", {"suite": "tests/contract/serve/test_confirm_self.py", **doc})
    return proc, doc


def test_self_is_ok_without_hf(selfrun):
    proc, doc = selfrun
    assert proc.returncode == 0 and doc["verdict"] == "OK", proc.stdout + proc.stderr
    checks = doc["checks"]
    assert "hf_rows" not in checks and "hf_reference_s" not in doc["timings"], checks
    assert checks["files"]["count"] == 44 and checks["logprobs"]["files"] == 44, checks
    assert checks["logprobs"]["ok"] and checks["logprobs"]["compared"] > 1000, checks["logprobs"]
    # the last position of every file too: the first generated token's logprobs, read by token id
    assert checks["logprobs"]["last_position_files"] == 44 and "not_looked_at" not in checks["logprobs"], checks
    assert checks["twin"]["ok"] and checks["twin"]["files"] == 44, checks["twin"]
    assert checks["recompute"]["ok"], checks["recompute"]
    assert sorted(checks["recompute"]["worst"]) == sorted(["embedding->1", "1->2", "2->3", "3->4"]), checks
    assert checks["recompute"]["layers_run"] == 4 and checks["recompute"]["files"] == "44 of 44", checks


def test_the_manifest_is_written_beside_every_calls_files(selfrun):
    from compat.serve.manifest import Manifest

    _, doc = selfrun
    assert len(doc["manifests"]) == 2, doc["manifests"]  # one per client run
    for path in doc["manifests"]:
        manifest = Manifest.read(Path(path).parent)
        assert manifest.rows == [1, 2, 3, 4] and manifest.final_id == 4 and manifest.dtype == "float32"
        assert manifest.vllm != "unknown" and manifest.speculators != "unknown", manifest


def test_options_reach_vllms_config(selfrun):
    _, doc = selfrun
    text = Path(doc["log"]).read_text(errors="replace")
    assert doc["options"]["max_model_len"] == 256, doc["options"]  # the model's own limit, under 512
    # vLLM's resolved config (engine/arg_utils, "Initializing a V1 LLM engine ... with config: ...")
    assert re.search(r"max_seq_len=256\b", text), "vLLM did not get max_model_len 256"
    assert re.search(r"max_num_batched_tokens['\"]?[:=]\s*48\b", text) or "max_num_batched_tokens=48" in text, \
        "vLLM did not get the budget of 48"
    chunk = doc["checks"]["chunked_prefill"]
    assert chunk["budget"] == 48 and chunk["chunked"] and max(chunk["context_tokens_per_step"]) <= 48, chunk


def test_a_max_model_len_over_the_models_limit_is_an_error_with_vllms_reason(vllm_base):
    proc, doc = confirm(spread_llama(), "confirm-mml-512", "--reference", "none", "--layers", "1,2,3,4",
                        "--max-model-len", "512")
    assert proc.returncode == 1 and doc["verdict"] == "ERROR", proc.stdout + proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first.startswith("ERROR: User-specified max_model_len (512) is greater than the derived max_model_len"), \
        first
    assert json.dumps(doc)  # the report is written on an error too
