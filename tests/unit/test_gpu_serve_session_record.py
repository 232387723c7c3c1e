"""``python -m ci.gpu record --junit ... --serve-runs records.jsonl --serve-logs logs.tgz``: a pytest session that
started servers on the GPU is the serve path's record, its versions and runners those its own lines say, each
server's model the one its log says it loaded; one record is one install.

The session read here is the contract-cases run of vLLM 0.34.0 on an H100 (``docs/gpu/mrv2/h100/``): its lines were
written on the device by ``importlib.metadata`` and the servers' logs name ``/tmp/gl/cache/models/serve-tiny-llama``
in float32; vLLM 0.34.0 has no V1 runner, so both servers ran V2.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ci.gpu import record

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "docs" / "gpu" / "mrv2" / "h100"


def test_the_session_lines_give_the_versions_runners_and_models():
    said = record.serve_session(RUN / "records_cases-fp32.jsonl", RUN / "logs_cases-fp32.tgz")
    assert said["versions"] == {"vllm": "0.34.0", "speculators": "0.9.0", "torch": "2.14.0", "transformers": "5.19.0"}
    resolved = said["details"]["resolved"]
    assert sorted(resolved) == ["contract-cases-chunked-cuda-float32", "contract-cases-unchunked-cuda-float32"]
    assert {r["runner"] for r in resolved.values()} == {"V2"}
    for model in said["details"]["models"].values():
        assert model["label"] == "/tmp/gl/cache/models/serve-tiny-llama" and model["dtype"] == "float32"
        assert model["architecture"] == "LlamaForCausalLM" and model["quantization"] == "none"
        assert model["not_kept"] == ["layers", "hidden_size", "experts"]  # a server log does not say them


def test_without_logs_the_model_is_said_not_kept():
    said = record.serve_session(RUN / "records_cases-bf16.jsonl")
    assert all(m["label"] is None and "label" in m["not_kept"] for m in said["details"]["models"].values())


def test_servers_of_two_installs_are_refused(tmp_path):
    lines = [json.loads(line) for line in (RUN / "records_cases-bf16.jsonl").read_text().splitlines()]
    lines[1]["versions"]["vllm"] = "0.33.0"
    mixed = tmp_path / "records.jsonl"
    mixed.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(ValueError, match="different vllm versions"):
        record.serve_session(mixed)


def test_the_command_line_writes_a_serve_record_that_names_v2(tmp_path, monkeypatch):
    monkeypatch.setattr(record, "OUT", tmp_path)
    from ci.gpu.__main__ import main

    assert main(["record", "--junit", str(RUN / "junit_cases-bf16.xml"), "--name", "t-cases",
                 "--stamp", str(RUN / "stamp_2b0f41b.json"), "--serve-runs", str(RUN / "records_cases-bf16.jsonl"),
                 "--serve-logs", str(RUN / "logs_cases-bf16.tgz")]) == 0
    doc = json.loads((tmp_path / "t-cases.json").read_text())
    assert doc["path"] == "serve" and doc["status"] == "pass" and doc["versions"]["vllm"] == "0.34.0"
    assert doc["commit"].startswith("2b0f41b")
    assert {r["runner"] for r in doc["details"]["resolved"].values()} == {"V2"}
