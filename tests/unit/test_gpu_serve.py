"""The serve path's GPU kit (ci/gpu/serve*.py, serve.sh, test_h200_*.py) without a GPU or vLLM.

What can break unseen here: the GPU modules must collect the contract tests' own functions (a renamed contract
test would silently drop out of the GPU run), a record line must keep the numbers a README row quotes, the
summary must surface the upstream error line, and serve.sh must refuse to run without the payload.
"""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from ci.gpu import serve_records, serve_summary

REPO = Path(__file__).resolve().parents[2]


def _outcome(verdict="ERROR", reason="", checks=None, rows=None):
    doc = {"verdict": verdict, "reason": reason, "checks": checks or {}, "timings": {}, "rows": rows or {}, "log": ""}
    return SimpleNamespace(as_dict=lambda: doc)


def _spec():
    return SimpleNamespace(dtype="bfloat16", device="cuda", layer_ids=[2, 4, 5, 8], max_num_batched_tokens=512,
                           enable_chunked_prefill=False, enable_prefix_caching=False, env={}, extra_args=[])


def _collect(*modules: str):
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=", "--collect-only",
                           "-q", *modules], cwd=REPO, capture_output=True, text=True)


def test_gpu_modules_collect_every_contract_test():
    out = _collect("ci/gpu/test_h200_serve_llama.py", "ci/gpu/test_h200_k4.py")
    assert "16 tests collected" in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]
    for name in ("test_ok[float32]", "test_logits_from_final_row_equal_served_prompt_logprobs[bfloat16]",
                 "test_without_k4_the_final_id_is_missing[bfloat16]", "test_with_k4_every_row_equals_hf[float32]"):
        assert name in out.stdout, name


def test_k13_and_dense_k4_modules_collect_the_contract_proofs():
    out = _collect("ci/gpu/test_h200_k13.py", "ci/gpu/test_h200_k4_dense.py")
    assert "5 tests collected" in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]
    for name in ("test_without_k13_final_chunks_are_silently_wrong", "test_with_k13_every_row_equals_hf",
                 "test_left_out_only_the_tail_of_a_file_is_wrong", "test_without_k4_the_final_id_is_missing",
                 "test_with_k4_every_row_equals_hf"):
        assert name in out.stdout, name


def test_k13_tail_rule_tells_a_final_chunk_from_a_whole_file():
    from ci.gpu.test_h200_k13 import tails

    files = [{"file": "a", "tokens": 12, "bad_tokens": [7, 8, 9, 10, 11]},
             {"file": "b", "tokens": 12, "bad_tokens": [0, 1, 2]}, {"file": "c", "tokens": 5, "bad_tokens": []}]
    assert [(t["file"], t["tail"]) for t in tails(files)] == [("a", True), ("b", False)]


def test_a_record_line_keeps_spec_outcome_and_versions(tmp_path, monkeypatch):
    path = tmp_path / "records.jsonl"
    monkeypatch.setenv("GPU_SERVE_RECORDS", str(path))
    serve_records.record("k4-applied-bfloat16-mla", _spec(), _outcome("WRONG", "failed: hf_rows", rows={2: 0.507}))
    line = json.loads(path.read_text())
    assert line["name"] == "k4-applied-bfloat16-mla" and line["spec"]["layer_ids"] == [2, 4, 5, 8]
    assert line["outcome"]["rows"] == {"2": 0.507} and "vllm" in line["versions"]
    assert line["commit"] == "unknown"  # GPU_SERVE_COMMIT unset: never a guess


def test_no_records_variable_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("GPU_SERVE_RECORDS", raising=False)
    monkeypatch.chdir(tmp_path)
    serve_records.record("x", _spec(), _outcome())
    assert list(tmp_path.iterdir()) == []


def test_summary_surfaces_the_upstream_error_line(tmp_path):
    crash = ("HTTPError: HTTP Error 500\n(EngineCore pid=1) INFO 12-01 [kv_cache_utils.py:1] GPU KV cache size\n"
             "(EngineCore pid=1) ERROR 12-01 [core.py:1138] RuntimeError: The expanded size of the tensor (4) must "
             "match the existing size (3)\n(APIServer pid=2) ERROR 12-01 [async_llm.py:699] EngineDeadError")
    line = {"name": "k4-left-out", "at": "2026-12-01T15:22:30Z", "versions": {}, "spec": {"dtype": "bfloat16"},
            "outcome": _outcome("ERROR", crash).as_dict()}
    (tmp_path / "call3_records.jsonl").write_text(json.dumps(line) + "\n")
    (row,) = serve_summary.summary(tmp_path)
    assert row["call"] == "call3" and row["verdict"] == "ERROR"
    assert row["commit"] == row["suite"] == "not recorded"  # a record without them says so, never a guess
    assert row["key_line"].startswith("RuntimeError: The expanded size of the tensor (4)"), row["key_line"]


def test_serve_sh_refuses_without_the_payload(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path / "out"), "GPU_LANE_TMP": str(tmp_path / "gl"),
           "GPU_SERVE_WHEELS": str(tmp_path)}
    (tmp_path / "out").mkdir()
    out = subprocess.run(["bash", "ci/gpu/serve.sh", "pytest", "x", "ci/gpu/test_h200_k4.py"], cwd=REPO, env=env,
                         capture_output=True, text=True)
    assert out.returncode == 3 and "run device.sh stage1" in out.stdout, out.stdout + out.stderr
    assert not (tmp_path / "out" / "junit_x.xml").exists()
