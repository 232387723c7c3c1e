"""A tiny DeepSeek-V3 with no routed experts (every layer a dense MLA layer), its weights rounded to bfloat16.

Why: K4's bf16 proof on an H200 (docs/gpu/serve, call 3) missed the bf16 bound by 0.2-0.5 on the MoE model,
and a bf16 rounding of a router's input can pick other experts, an O(1) change that is not a capture bug.
``first_k_dense_replace = num_hidden_layers`` keeps MLA, YaRN and ``DeepseekV2Model.forward`` (where K4 acts)
and drops the routing.  The weights are bf16 values stored in float32, so the server's bf16 cast is exact and
HF's float32 reference runs on the very weights the server holds: the gap left is bf16 arithmetic alone.
"""

from __future__ import annotations

import os


def model_path() -> str:
    import transformers

    from compat.layout import cache_root

    return os.path.join(str(cache_root()), "models", f"tiny-deepseek-v3-dense-bf16w-tf{transformers.__version__}")


def build(path: str | None = None, seed: int = 0) -> str:
    import torch
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    from fixtures import tiny_mla

    path = path or model_path()
    text = {**tiny_mla.text_params(), "first_k_dense_replace": tiny_mla.text_params()["num_hidden_layers"]}
    params = {"kind": "deepseek-dense-bf16w", "text": text, "seed": seed, "v": 1}
    if tiny_mla._fresh(path, params):
        return path
    torch.manual_seed(seed)
    model = DeepseekV3ForCausalLM(DeepseekV3Config(**text)).to(torch.float32).eval()
    if any("experts" in name or name.endswith(".gate.weight") for name, _ in model.named_parameters()):
        raise RuntimeError("the dense DeepSeek-V3 still has routed experts: first_k_dense_replace not honoured")
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
    tiny_mla._save(model, path, text["vocab_size"], params, {})
    return path
