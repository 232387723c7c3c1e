"""The two references a serve-path file is compared with.

* Hugging Face float32: id ``k < L`` is ``output_hidden_states[k]`` (the
  residual entering decoder layer ``k``; 0 is the embedding output), id ``L``
  the input of the final norm, taken by a forward pre-hook on it (HF's last
  ``hidden_states`` entry is after the norm).
* No HF at all: the logits rebuilt from the file's final row,
  ``lm_head(norm(h_L))``, with the checkpoint's own norm and head weights
  read from its safetensors, against the same server's ``prompt_logprobs``.
  It needs two weight tensors, so it scales to a 1T model.
"""

from __future__ import annotations

import json
from pathlib import Path


def load_hf(model: str):
    """(HF model, the decoder whose ``.norm`` is the final norm); Kimi-K2.5 is a wrapper around DeepSeek-V3."""
    import torch

    config = json.loads((Path(model) / "config.json").read_text())
    if config.get("model_type") == "kimi_k25":
        from transformers.models.kimi_k25 import Kimi_K25ForConditionalGeneration

        hf = Kimi_K25ForConditionalGeneration.from_pretrained(model, dtype=torch.float32).eval()
        return hf, hf.model.language_model
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    return hf, hf.model


def hf_rows(model: str, prompts, ids: list[int]) -> dict[tuple, "object"]:
    """``{prompt: float32 [T, len(ids), H]}`` in ``ids`` order (entering convention; id L pre-norm)."""
    import torch

    hf, decoder = load_hf(model)
    depth = decoder.config.num_hidden_layers
    seen = {}
    hook = decoder.norm.register_forward_pre_hook(lambda _m, args: seen.__setitem__("final", args[0].detach()))
    refs = {}
    try:
        with torch.no_grad():
            for prompt in dict.fromkeys(tuple(p) for p in prompts):
                states = hf(input_ids=torch.tensor([prompt]), output_hidden_states=True).hidden_states
                rows = [seen["final"][0] if k == depth else states[k][0] for k in ids]
                refs[prompt] = torch.stack(rows, dim=1).float()
    finally:
        hook.remove()
    return refs


def _weights(model: str, suffixes: tuple[str, ...]) -> dict[str, "object"]:
    """The one tensor whose name ends with each suffix, from the checkpoint's safetensors (no model built)."""
    from safetensors import safe_open

    found: dict[str, list] = {s: [] for s in suffixes}
    for file in sorted(Path(model).glob("*.safetensors")):
        with safe_open(str(file), "pt") as handle:
            for name in handle.keys():
                for suffix in suffixes:
                    if name == suffix or name.endswith("." + suffix):
                        found[suffix].append((name, file))
    out = {}
    for suffix, hits in found.items():
        names = {n for n, _ in hits if "vision" not in n and "mtp" not in n and ".layers." not in n}
        if len(names) != 1:
            raise ValueError(f"{model}: expected one tensor named *{suffix}, found {sorted(names) or 'none'}")
        name = names.pop()
        file = next(f for n, f in hits if n == name)
        with safe_open(str(file), "pt") as handle:
            out[suffix] = handle.get_tensor(name).float()
    return out


def final_logprobs(model: str, final_rows):
    """``log_softmax(lm_head(rmsnorm(h_L)))`` ``[T, vocab]`` from the checkpoint's weights (tied head allowed)."""
    import torch

    config = json.loads((Path(model) / "config.json").read_text())
    text = config.get("text_config") or config
    tied = bool(text.get("tie_word_embeddings", config.get("tie_word_embeddings", False)))
    head = "embed_tokens.weight" if tied else "lm_head.weight"
    weights = _weights(model, ("norm.weight", head))
    eps = float(text.get("rms_norm_eps", 1e-6))
    h = final_rows.float()
    normed = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * weights["norm.weight"]
    return torch.log_softmax(normed @ weights[head].T, dim=-1)
