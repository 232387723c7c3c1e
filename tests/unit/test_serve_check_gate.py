"""``compat confirm --check REPORT`` gates serve reports: each verdict has one exit code, and a report that does not
say what it confirmed certifies nothing.

Before, --check refused every serve report with exit 2 ("gates the old path's reports only"), so a CI could not
gate a serve run's report at all.  The reports here are the documents ``compat confirm --path serve --json-file``
writes (the runner's result, ``options`` and the ``confirmed`` block of compat.serve.identity).
"""

from __future__ import annotations

import io
import json

import pytest

from compat.confirm_command import main as confirm_main
from compat.confirm_command import check_report as check
from compat.serve.check import IDENTITY as SERVE_IDENTITY

CONFIRMED = {"source": "serve", "model": "/models/tiny-llama", "architectures": ["LlamaForCausalLM"],
             "wrapper_architectures": None, "model_type": "llama", "num_layers": 4, "hidden_size": 128,
             "routed_experts": None, "ffn": "dense", "quantization": None, "dtype": "float32",
             "dtype_source": "server log", "ids_asked": [1, 2, 4], "ids_served": [1, 2, 4], "vllm": "0.32.0+cpu",
             "speculators": "0.9.0", "runner": "V1", "runner_evidence": "...", "device": "cpu", "device_name": "x86",
             "tensor_parallel_size": 1, "pipeline_parallel_size": 1, "kit": {"commit": "c33468f" + "0" * 33}}
CHECKS = {"chunked_prefill": {"ok": True}, "prefix_cache": {"ok": True, "hit_tokens": 64},
          "files": {"ok": True, "count": 44}, "logprobs": {"ok": True}, "hf_rows": {"ok": True}}
OK_REPORT = {"verdict": "OK", "reason": "", "checks": CHECKS, "timings": {}, "rows": {"1": 1e-6},
             "log": "/tmp/compat-serve-x/vllm-serve.log", "manifests": [], "options": {"reference": "hf"},
             "confirmed": CONFIRMED}


def gate(tmp_path, doc) -> tuple[int, str]:
    path = tmp_path / "serve.json"
    path.write_text(json.dumps(doc))
    out = io.StringIO()
    return check(str(path), now={}, out=out), out.getvalue()


def test_an_ok_report_with_every_check_ok_passes_and_says_what_it_confirmed(tmp_path):
    code, out = gate(tmp_path, OK_REPORT)
    assert code == 0, out
    assert "/models/tiny-llama (LlamaForCausalLM, 4 layers, hidden 128, dense" in out and "runner V1" in out


@pytest.mark.parametrize("verdict, code", [("WRONG", 1), ("ERROR", 1), ("INCOMPLETE", 4)])
def test_each_verdict_has_its_exit_code(tmp_path, verdict, code):
    doc = {**OK_REPORT, "verdict": verdict, "reason": "failed: hf_rows" if verdict == "WRONG" else "something",
           "checks": {**CHECKS, "hf_rows": {"ok": verdict != "WRONG"}}}
    got, out = gate(tmp_path, doc)
    assert got == code and f"verdict {verdict}" in out, out


def test_a_report_without_confirmed_cannot_tell_what_it_confirmed(tmp_path):
    doc = {k: v for k, v in OK_REPORT.items() if k != "confirmed"}
    code, out = gate(tmp_path, doc)
    assert code == 1 and "cannot tell what was confirmed" in out, out


@pytest.mark.parametrize("missing", ["model", "hidden_size", "runner", "tensor_parallel_size"])
def test_a_confirmed_block_missing_a_field_cannot_tell_either(tmp_path, missing):
    assert missing in SERVE_IDENTITY
    code, out = gate(tmp_path, {**OK_REPORT, "confirmed": {**CONFIRMED, missing: None}})
    assert code == 1 and f"does not name {missing}" in out, out


def test_an_ok_with_a_check_not_ok_is_not_certified(tmp_path):
    code, out = gate(tmp_path, {**OK_REPORT, "checks": {**CHECKS, "logprobs": {"ok": False}}})
    assert code == 1 and "logprobs not ok" in out, out
    code, out = gate(tmp_path, {**OK_REPORT, "checks": {}})
    assert code == 1 and "no check" in out, out


def test_a_verdict_no_serve_run_gives_is_unreadable(tmp_path, capsys):
    code, _ = gate(tmp_path, {**OK_REPORT, "verdict": "MAYBE"})
    assert code == 2 and "no serve run gives" in capsys.readouterr().err


def test_the_command_line_gates_it_too(tmp_path, capsys):
    path = tmp_path / "serve.json"
    path.write_text(json.dumps({**OK_REPORT, "verdict": "INCOMPLETE", "reason": "recompute: not rebuilt"}))
    assert confirm_main(["--check", str(path)]) == 4
    assert "not rebuilt" in capsys.readouterr().out


def test_an_old_path_report_is_still_compared_with_the_install(tmp_path):
    """A generator report's ``confirmed`` block holds a surface fingerprint: --check compares it as before (here
    with another install's block: it differs, exit 1), never as a serve report."""
    doc = {"verdict": "OK", "reference": "hf", "confirmed": {"fingerprint": "a" * 16, "versions": {},
                                                             "generator_files": {}}}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(doc))
    out = io.StringIO()
    now = {"fingerprint": "b" * 16, "versions": {}, "generator_files": {}}
    assert check(str(path), now=now, out=out) == 1 and "surface fingerprint" in out.getvalue()


def test_check_and_the_run_give_each_verdict_the_same_code():
    from compat.exit_policy import VERDICT_CODES
    from compat.serve.runner import EXIT_CODES

    documented = {"OK": 0, "WRONG": 1, "ERROR": 1, "INCOMPLETE": 4}  # compat confirm --help's exit codes
    assert VERDICT_CODES == documented and EXIT_CODES == documented


def test_an_ok_with_a_part_not_looked_at_is_not_certified(tmp_path):
    code, out = gate(tmp_path, {**OK_REPORT, "checks": {**CHECKS, "recompute": {"ok": True,
                                                                                 "not_looked_at": "59->61"}}})
    assert code == 1 and "recompute not ok" in out, out
