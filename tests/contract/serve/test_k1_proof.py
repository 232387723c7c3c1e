"""K1's leave-one-out proof on a real ``vllm serve``: without it every request fails with the upstream error;
with it (test_serve_llama) every file equals the reference."""

from __future__ import annotations

import pytest

from compat.serve import ServeSpec, run

from . import k1
from .conftest import model_dir, prompts

pytestmark = [pytest.mark.serve, pytest.mark.proof]


@pytest.fixture
def k1_off(k1_on):
    """Only K1 left out (the session has it on); back on afterwards."""
    k1.set_applied(False)
    yield
    k1.set_applied(True)


def test_without_k1_requests_fail_with_the_upstream_error(k1_off, tmp_path):
    from fixtures.tiny_model import build_tiny_llama

    made, _ = k1.decision()
    assert made.verdict == "needed", made.reason
    model = build_tiny_llama(model_dir("serve-tiny-llama"))
    spec = ServeSpec(model=model, work_dir=tmp_path, calls=prompts(0, 512, 64)[:1], layer_ids=[1, 4],
                     hf_check=False, logprobs_check=False)
    outcome = run(spec)
    assert outcome.verdict == "ERROR", outcome.as_dict()
    assert made.patch.symptoms[0] in outcome.reason, outcome.reason
    assert not list((tmp_path / "call0" / "hidden_states").glob("*.safetensors"))
