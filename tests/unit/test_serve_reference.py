"""The serve path's no-HF reference rebuilds logits with the checkpoint's own final-norm form, or says it cannot."""

from __future__ import annotations

import pytest

from compat.serve import reference


@pytest.mark.parametrize("kind", ["llama", "deepseek_v3", "qwen3"])
def test_plain_rms_norm(kind):
    assert reference.norm_offset({"model_type": kind}) == 0.0


@pytest.mark.parametrize("kind", ["qwen3_next", "qwen3_5"])
def test_zero_centred_norm(kind):
    # transformers' Qwen3NextRMSNorm / Qwen3_5RMSNorm: output * (1.0 + self.weight), weights initialised to zeros
    assert reference.norm_offset({"model_type": kind}) == 1.0


def test_an_unknown_model_type_is_not_guessed():
    with pytest.raises(reference.NormUnknown, match="not known"):
        reference.norm_offset({"model_type": "some_new_arch"})


def test_a_logit_transform_after_the_head_is_not_rebuilt():
    with pytest.raises(reference.NormUnknown, match="final_logit_softcapping"):
        reference.norm_offset({"model_type": "llama", "final_logit_softcapping": 30.0})
