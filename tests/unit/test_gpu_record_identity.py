"""GPU records take what ran from the run's report (its ``confirmed`` block), not from text typed into the kit.

Before, a serve record's versions and device came from the command line (``--versions``, machine.txt) and the
real-width scenarios' widths were typed into ci/gpu/record.py's expectations.  Now a report that names its model
and versions is read; the typed text stays only for records that predate such reports, and says so.
"""

from __future__ import annotations

import copy
import json

from ci.gpu import record as gpu_record

CONFIRMED = {"source": "serve", "model": "/tmp/gl/models/kimi-heads-int4", "architectures": ["DeepseekV3ForCausalLM"],
             "num_layers": 4, "hidden_size": 7168, "routed_experts": 8, "ffn": "moe",
             "quantization": {"method": "compressed-tensors", "format": "pack-quantized"}, "dtype": "bfloat16",
             "ids_served": [1, 2, 3, 4], "vllm": "0.26.0", "speculators": "0.9.0", "runner": "V1", "device": "cuda",
             "device_name": "NVIDIA H100 80GB HBM3", "tensor_parallel_size": 2, "pipeline_parallel_size": 1,
             "kit": {"commit": "c" * 40}}
REPORT = {"verdict": "OK", "checks": {"files": {"ok": True}, "hf_rows": {"ok": True}},
          "timings": {"server_start_s": 60.0}, "confirmed": CONFIRMED}
MACHINE = {"kind": "cuda", "count": 8, "names": ["NVIDIA H200"] * 8}


def _record(tmp_path, doc, **typed):
    report = tmp_path / "confirm.json"
    report.write_text(json.dumps(doc))
    return gpu_record.serve_record("h100-serve-x", report, **typed)


def test_a_serve_record_takes_versions_device_and_model_from_the_report(tmp_path):
    record = _record(tmp_path, REPORT, device=MACHINE, versions={"vllm": "0.20.0", "torch": "2.11.0"})
    assert record.device == {"kind": "cuda", "count": 2, "names": ["NVIDIA H100 80GB HBM3"] * 2}
    assert record.versions == {"vllm": "0.26.0", "speculators": "0.9.0", "torch": "2.11.0"}
    assert record.details["confirmed"] == CONFIRMED
    assert record.details["typed"] == "torch typed on the command line (the report does not name them)"
    what = record.tests[0]["what"]
    assert "hidden 7168, 4 layers, 8 routed experts, compressed-tensors/pack-quantized" in what
    assert "vLLM 0.26.0 runner V1" in what and "TP 2" in what


def test_a_report_without_the_block_keeps_the_typed_values_and_says_so(tmp_path):
    doc = {k: v for k, v in REPORT.items() if k != "confirmed"}
    record = _record(tmp_path, doc, device=MACHINE, versions={"vllm": "0.26.0"})
    assert record.device == MACHINE and record.versions == {"vllm": "0.26.0"}
    assert record.details["confirmed"] is None
    assert "typed on the command line: the report names no 'confirmed' block" in record.details["typed"]


def test_the_real_width_scenarios_say_their_widths_were_typed():
    """records_real.json ran on the old path, whose reports name no model: the typed widths stay, marked."""
    for test in gpu_record.set_record("real").tests:
        assert "hidden 7168" in test["what"] and gpu_record.TYPED_MARK in test["what"], test["what"]


def test_a_scenario_whose_report_names_its_model_is_read_from_it():
    raw = gpu_record._raw()
    key = ("real", "kimi_real_int4_extract")
    rec = copy.deepcopy(raw[key])
    rec["confirm_json"]["confirmed"] = {**CONFIRMED, "hidden_size": 2048}
    said = gpu_record.model_said(key, rec)
    assert said.startswith("hidden 2048, 4 layers") and gpu_record.TYPED_MARK not in said
