"""compat.confirm.compare on plain tensors (no vLLM): the per-layer statistics, the final norm, no reference.

Expected values are worked out by hand from the definitions in the module docstring (max|diff| / mean|h_ref|,
||diff|| / ||h_ref||, the smallest per-token cosine), never read back from the code under test.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from compat.confirm.compare import Reference, compare, layer_stats  # noqa: E402


def _result(prompt, states):
    return {"input_ids": torch.tensor(prompt), "hidden_states": states}


def test_identical_states_have_zero_error_and_cosine_one():
    ref = torch.arange(1.0, 9.0).reshape(2, 4)
    stats = layer_stats(ref.clone(), ref)
    assert stats["max_abs_diff"] == 0 and stats["rel_diff"] == 0 and stats["nrms"] == 0
    assert stats["min_cos"] == pytest.approx(1.0)


def test_the_three_statistics_by_hand():
    ref = torch.tensor([[1.0, -1.0, 1.0, -1.0], [2.0, 2.0, 2.0, 2.0]])  # mean|ref| 1.5, ||ref||^2 = 4 + 16
    got = ref.clone()
    got[1, 0] += 3.0  # one element off by 3
    stats = layer_stats(got, ref)
    assert stats["max_abs_diff"] == pytest.approx(3.0)
    assert stats["rel_diff"] == pytest.approx(3.0 / 1.5)
    assert stats["nrms"] == pytest.approx(3.0 / math.sqrt(20.0))
    # token 1: (5, 2, 2, 2) . (2, 2, 2, 2) = 22; |.| = sqrt(37) * 4
    assert stats["min_cos"] == pytest.approx(22.0 / (math.sqrt(37.0) * 4.0))


def test_one_massive_activation_dominates_the_max_statistic_not_the_rms_one():
    """Why a second statistic: a correct run's one large relative error on a massive activation."""
    ref = torch.ones(8, 64)
    ref[0, 0] = 1000.0  # a massive activation
    got = ref.clone()
    got[0, 0] *= 1.01  # 1 % off there only, as bf16 rounding of a huge value
    stats = layer_stats(got, ref)
    assert stats["rel_diff"] > 0.2  # over the bf16 bound against HF
    assert stats["nrms"] < 0.02 and stats["min_cos"] > 0.9999


def test_compare_judges_rel_diff_per_layer_and_names_the_layer():
    prompts = [[5, 6, 7]]
    ref0, ref1 = torch.ones(3, 4), torch.full((3, 4), 2.0)
    reference = Reference(None, {tuple(prompts[0]): [ref0, ref1]}, 2)
    good = compare([_result(prompts[0], [ref0.clone(), ref1.clone()])], prompts, reference, [0, 1], rtol=1e-3)
    assert good["problems"] == [] and set(good["layers"]) == {0, 1}
    shifted = compare([_result(prompts[0], [ref1.clone(), ref1.clone()])], prompts, reference, [0, 1], rtol=1e-3)
    assert len(shifted["problems"]) == 1 and shifted["problems"][0].startswith("layer 0:")
    assert shifted["layers"][0]["rel_diff"] == pytest.approx(1.0)  # |2 - 1| / mean|1|


def test_compare_applies_the_holders_final_norm_to_the_last_layer_only():
    class Holder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = torch.nn.Module()
            self.model.norm = torch.nn.LayerNorm(4)  # weight 1, bias 0: the plain layer norm below

    holder = Holder()
    prompt = [1, 2]
    pre = torch.tensor([[1.0, 2.0, 3.0, 4.0], [0.0, 1.0, 0.0, 1.0]])
    normed = torch.nn.functional.layer_norm(pre, (4,))
    reference = Reference(holder, {tuple(prompt): [pre.clone(), normed]}, 2)
    found = compare([_result(prompt, [pre.clone(), pre.clone()])], [prompt], reference, [0, 1], rtol=1e-5)
    assert found["problems"] == [], found


def test_a_plain_triple_is_a_reference_too():
    prompt = [3]
    found = compare([_result(prompt, [torch.ones(1, 2)])], [prompt], (None, {(3,): [torch.ones(1, 2)]}, 1), [0])
    assert found["problems"] == []


def test_no_reference_checks_only_the_invariants():
    prompts = [[1, 2], [3]]
    results = [_result(p, [torch.ones(len(p), 4)]) for p in prompts]
    assert compare(results, prompts, Reference(None, None, 1), [0], hidden_size=4) == {"layers": {}, "problems": [], "notes": []}
    found = compare(results[::-1], prompts, Reference(None, None, 1), [0], hidden_size=4)
    assert any("(order)" in p for p in found["problems"])
