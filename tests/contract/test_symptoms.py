"""Every declared symptom is specific enough that an unrelated error cannot pass a proof.

A proof passes when the left-out run's error text contains one of the patch's
symptoms, so a bare field name (p12 once said only "is_encoder_decoder") would
match any error that mentions that field.  Error symptoms are upstream error
text: a sentence (several words and punctuation from the message), not a name.
"""

from __future__ import annotations

import re

import pytest

from compat.registry import load_patches

SILENT = "wrong hidden states"
NOT_HERE = "(GPU only"  # a bug this CPU cannot show; the proofs observe why instead of matching text

ERROR_SYMPTOMS = [(p.id, s) for p in load_patches() for s in p.symptoms
                  if not s.startswith(SILENT) and not s.startswith(NOT_HERE)]


@pytest.mark.parametrize("patch_id,symptom", ERROR_SYMPTOMS, ids=[f"{p}:{s[:30]}" for p, s in ERROR_SYMPTOMS])
def test_error_symptom_is_a_specific_upstream_message(patch_id, symptom):
    words = re.findall(r"[A-Za-z_]+", symptom)
    assert len(symptom) >= 30 and len(words) >= 4, f"{patch_id}: symptom {symptom!r} is too short to be specific"
    assert re.search(r"[\s(:'\.]", symptom), f"{patch_id}: {symptom!r} is a bare name, not an error message"


def test_every_patch_declares_a_symptom():
    assert all(p.symptoms and all(p.symptoms) for p in load_patches())
