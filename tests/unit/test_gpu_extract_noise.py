"""ci/gpu/extract_noise.py's statistic is confirm's (max|diff| / mean|h_ref|), and a misplaced row shows in its cosine."""

import pytest

torch = pytest.importorskip("torch")


def test_equal_states_have_no_noise_and_a_swapped_row_is_seen():
    from ci.gpu.extract_noise import stats

    g = torch.Generator().manual_seed(0)
    ref = torch.randn(6, 16, generator=g)
    assert stats(ref.clone(), ref) == {"rel": 0.0, "nrms": 0.0, "min_cos": pytest.approx(1.0, abs=1e-6)}
    swapped = ref.clone()
    swapped[[1, 2]] = ref[[2, 1]]
    out = stats(swapped, ref)
    assert out["min_cos"] < 0.9 and out["rel"] > 1.0


def test_the_statistic_is_relative_to_the_references_mean():
    from ci.gpu.extract_noise import stats

    ref = torch.full((2, 4), 2.0)
    assert stats(ref + torch.tensor([[0.5, 0, 0, 0], [0, 0, 0, 0]]), ref)["rel"] == pytest.approx(0.25)
