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

from pathlib import Path

from compat import checkpoint


def load_hf(model: str, trust_remote_code: bool = False):
    """(HF model, the decoder whose ``.norm`` is the final norm); Kimi-K2.5 is a wrapper around DeepSeek-V3.

    ``trust_remote_code``: let transformers run the checkpoint's own code (``auto_map``), as
    ``vllm serve --trust-remote-code`` does; off, such a checkpoint fails to load rather than run unasked code."""
    import torch

    if checkpoint.read_config(model).get("model_type") == "kimi_k25":
        from transformers.models.kimi_k25 import Kimi_K25ForConditionalGeneration

        hf = Kimi_K25ForConditionalGeneration.from_pretrained(model, dtype=torch.float32).eval()
        return hf, hf.model.language_model
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32, trust_remote_code=trust_remote_code).eval()
    return hf, hf.model


def hf_rows(model: str, prompts, ids: list[int], margins: dict | None = None,
            trust_remote_code: bool = False) -> dict[tuple, "object"]:
    """``{prompt: float32 [T, len(ids), H]}`` in ``ids`` order (entering convention; id L pre-norm).

    ``margins``: a dict that gets, per prompt, each MoE router's per-token routing margin (compat.shared.routing).
    """
    import torch

    from compat.shared.routing import MarginRecorder

    hf, decoder = load_hf(model, trust_remote_code)
    depth = decoder.config.num_hidden_layers
    seen = {}
    hook = decoder.norm.register_forward_pre_hook(lambda _m, args: seen.__setitem__("final", args[0].detach()))
    recorder = MarginRecorder(hf) if margins is not None else None
    refs = {}
    try:
        with torch.no_grad():
            for prompt in dict.fromkeys(tuple(p) for p in prompts):
                states = hf(input_ids=torch.tensor([prompt]), output_hidden_states=True).hidden_states
                rows = [seen["final"][0] if k == depth else states[k][0] for k in ids]
                refs[prompt] = torch.stack(rows, dim=1).float()
                if recorder is not None and recorder.active:
                    margins[prompt] = recorder.take()
    finally:
        hook.remove()
        if recorder is not None:
            recorder.remove()
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


#: The final norm's form per HF ``model_type`` (of the text config): ``x * w`` or zero-centred ``x * (1 + w)``
#: (transformers' Qwen3NextRMSNorm, Qwen3_5RMSNorm, GemmaRMSNorm).  A type not listed is not guessed: the logits
#: check says it could not rebuild them.
RMS_NORM = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "deepseek_v2", "deepseek_v3",
            "kimi_k2", "glm4_moe", "phi3", "olmo2"}
ZERO_CENTRED_RMS_NORM = {"qwen3_next", "qwen3_5", "qwen3_5_moe", "gemma"}
#: config keys that change the logits after the head (Gemma-2's softcap, Granite's scaling): not rebuilt here
LOGIT_TRANSFORMS = ("final_logit_softcapping", "logits_scaling")


class NormUnknown(ValueError):
    """The checkpoint's final norm form is not known here, so its logits are not rebuilt."""


def text_config(model: str) -> dict:
    """The checkpoint's text config (a multimodal wrapper's ``text_config``, else the config itself)."""
    return checkpoint.text_config(checkpoint.read_config(model))


def norm_offset(text_config: dict) -> float:
    """0 for ``x * w``, 1 for ``x * (1 + w)``; NormUnknown for a model type whose norm is not known here."""
    kind = text_config.get("model_type")
    transforms = [k for k in LOGIT_TRANSFORMS if text_config.get(k) not in (None, 1, 1.0)]
    if transforms:
        raise NormUnknown(f"model_type {kind!r} transforms its logits after the head ({', '.join(transforms)})")
    if kind in RMS_NORM:
        return 0.0
    if kind in ZERO_CENTRED_RMS_NORM:
        return 1.0
    raise NormUnknown(f"model_type {kind!r}: its final norm's form (x*w or x*(1+w)) is not known to the kit")


def final_logprobs(model: str, final_rows):
    """``log_softmax(lm_head(rmsnorm(h_L)))`` ``[T, vocab]`` from the checkpoint's weights (tied head allowed)."""
    import torch

    config = checkpoint.read_config(model)
    text = checkpoint.text_config(config)
    offset = norm_offset(text)
    tied = bool(text.get("tie_word_embeddings", config.get("tie_word_embeddings", False)))
    head = "embed_tokens.weight" if tied else "lm_head.weight"
    weights = _weights(model, ("norm.weight", head))
    eps = float(text.get("rms_norm_eps", 1e-6))
    h = final_rows.float()
    normed = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * (offset + weights["norm.weight"])
    return torch.log_softmax(normed @ weights[head].T, dim=-1)
