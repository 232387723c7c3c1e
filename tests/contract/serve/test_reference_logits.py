"""The serve path's no-HF reference (logits rebuilt from the final row) against HF's own logits, per norm form.

``compat confirm --path serve`` compares ``lm_head(norm(h_L))``, rebuilt from two checkpoint tensors, with the
server's ``prompt_logprobs``; here the same rebuild is fed HF's pre-norm final state and must give HF's
``log_softmax(logits)``: plain RMSNorm (Llama, DeepSeek-V3, Kimi-K2.5's DeepSeek language model) and the
zero-centred ``x * (1 + w)`` of Qwen3-Next.  No server: HF only (the serve lanes carry torch and transformers).
"""

from __future__ import annotations

import pytest

from compat.serve import reference

from . import hybrid_models
from .conftest import model_dir

pytestmark = [pytest.mark.serve]


def _model(name: str) -> str:
    from fixtures import tiny_mla
    from fixtures.tiny_model import build_tiny_llama

    if name == "llama":
        return build_tiny_llama(model_dir("serve-tiny-llama"))
    if name == "qwen3_next":
        return hybrid_models.qwen3_next()
    return tiny_mla.build(name)


@pytest.mark.parametrize("name", ["llama", "deepseek", "kimi", "qwen3_next"])
def test_rebuilt_logits_equal_hf(name, serve_lane):
    import torch

    model = _model(name)
    hf, decoder = reference.load_hf(model)
    seen = {}
    hook = decoder.norm.register_forward_pre_hook(lambda _m, args: seen.__setitem__("final", args[0].detach()))
    prompt = torch.tensor([list(range(4, 68))])
    try:
        with torch.no_grad():
            logits = hf(input_ids=prompt).logits[0].float()
    finally:
        hook.remove()
    want = torch.log_softmax(logits, dim=-1)
    got = reference.final_logprobs(model, seen["final"][0])
    assert got.shape == want.shape
    assert (got - want).abs().max().item() < 1e-4, (got - want).abs().max().item()
