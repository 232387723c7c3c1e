"""A checkpoint's decoder layers, rebuilt one at a time from its safetensors, for ``--reference self``'s recompute.

No model is built: transformers' own decoder-layer class is made on the meta device and each layer's tensors are
read from the safetensors one layer at a time (then dropped), so a middle id of a 1T model is checked with one
layer in memory.  Kimi-K2.5's INT4 routed experts (compressed-tensors ``pack-quantized``) are dequantized by
compressed-tensors' own decompressor as each layer is read: the weights vLLM's INT4 kernel multiplies by.

A checkpoint this module cannot rebuild raises :class:`NotRebuilt` with the reason: the caller reports the part
as not run, never as passed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

SKIP = ("vision", "mtp", "visual", "mm_projector", "multi_modal")


class NotRebuilt(ValueError):
    """The checkpoint's layers cannot be rebuilt here (quantized tensors, an unknown class): said, never guessed."""


@dataclass
class WeightIndex:
    """Which safetensors file holds each tensor, and its size in bytes, from the files' headers only."""

    model: str
    files: dict = field(default_factory=dict)  # name -> file
    sizes: dict = field(default_factory=dict)  # name -> bytes
    read_bytes: int = 0  # what the checks read so far

    @classmethod
    def of(cls, model: str) -> "WeightIndex":
        from safetensors import safe_open

        index = cls(model)
        for file in sorted(Path(model).glob("*.safetensors")):
            with safe_open(str(file), "pt") as handle:
                for name in handle.keys():
                    index.files[name] = file
                    piece = handle.get_slice(name)
                    index.sizes[name] = _numel(piece.get_shape()) * _itemsize(piece.get_dtype())
        return index

    @property
    def total_bytes(self) -> int:
        return sum(self.sizes.values())

    def layer_names(self, layer: int) -> dict[str, str]:
        """``{name inside the layer: checkpoint name}`` of decoder layer ``layer`` (the text model's)."""
        pattern = re.compile(rf"^(.*\.)?layers\.{layer}\.(.+)$")
        out = {}
        for name in self.files:
            match = pattern.match(name)
            if match and not any(s in (match.group(1) or "") for s in SKIP):
                out[match.group(2)] = name
        return out

    def layer_bytes(self, layer: int) -> int:
        return sum(self.sizes[n] for n in self.layer_names(layer).values())

    def named(self, suffix: str) -> str:
        hits = [n for n in self.files if (n == suffix or n.endswith("." + suffix)) and ".layers." not in n
                and not any(s in n for s in SKIP)]
        if len(hits) != 1:
            raise NotRebuilt(f"expected one tensor named *{suffix}, found {sorted(hits) or 'none'}")
        return hits[0]

    def read(self, names) -> dict:
        from safetensors import safe_open

        out = {}
        for name in names:
            with safe_open(str(self.files[name]), "pt") as handle:
                out[name] = handle.get_tensor(name)
            self.read_bytes += self.sizes[name]
        return out


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _itemsize(dtype: str) -> int:
    return {"F64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
            "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8}.get(dtype, 4)


class Layers:
    """transformers' decoder layers of a checkpoint, made on the meta device and filled one layer at a time."""

    def __init__(self, model: str, index: WeightIndex):
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        self.index = index
        try:
            config = AutoConfig.from_pretrained(model)
        except (ValueError, KeyError, OSError) as exc:
            raise NotRebuilt(f"transformers cannot read the config: {exc}") from None
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        quantization = getattr(text, "quantization_config", None) or getattr(config, "quantization_config", None)
        self.scheme = packed_int_scheme(quantization) if quantization else None
        if quantization:
            text = type(text).from_dict({k: v for k, v in text.to_dict().items() if k != "quantization_config"})
        text._attn_implementation = "sdpa"
        try:
            with torch.device("meta"):
                self.decoder = AutoModelForCausalLM.from_config(text).model
        except (ValueError, KeyError) as exc:
            raise NotRebuilt(f"no transformers class for model_type {text.model_type!r}: {exc}") from None
        self.config = text
        rotary = getattr(self.decoder, "rotary_emb", None)
        self.rotary = type(rotary)(config=text) if rotary is not None else None

    def embed(self, prompts) -> list:
        """The embedding output of each prompt's token ids (the embedding read once)."""
        import torch

        name = self.index.named("embed_tokens.weight")
        module = self.decoder.embed_tokens
        module.load_state_dict({"weight": self.index.read([name])[name].float()}, assign=True)
        with torch.no_grad():
            out = [module(torch.as_tensor(list(tokens))[None])[0] for tokens in prompts]
        module.to("meta")
        return out

    def load(self, number: int):
        """Decoder layer ``number`` with its checkpoint weights (float32), read once; :meth:`unload` drops them."""
        layer = self.decoder.layers[number]
        names = self.index.layer_names(number)
        tensors = self.index.read(names.values())
        state = {inner: tensors[name] for inner, name in names.items()}
        if self.scheme is not None:
            state = dequantize(state, self.scheme)
        state = fuse_experts({k: v.float() for k, v in state.items()}, dict(layer.state_dict(keep_vars=True)))
        try:
            layer.load_state_dict(state, strict=True, assign=True)
        except RuntimeError as exc:
            raise NotRebuilt(f"layer {number}'s tensors do not fit {type(layer).__name__}: "
                             f"{str(exc).splitlines()[0]}") from None
        return layer

    def unload(self, layer) -> None:
        layer.to("meta")

    def forward(self, layer, rows):
        """``rows`` ([T, H], entering the layer) through one loaded layer (causal, positions 0..T-1): [T, H]."""
        import torch

        with torch.no_grad():
            return self._layer(layer, rows.float()[None])[0]

    def run(self, sequences: list, layers) -> list:
        """Each of ``sequences`` ([T, H], entering ``layers[0]``) through ``layers`` in turn (causal, positions
        0..T-1); one layer's weights in memory at a time, read once for all sequences."""
        states = [rows.float() for rows in sequences]
        for number in layers:
            layer = self.load(number)
            states = [self.forward(layer, h) for h in states]
            self.unload(layer)
        return states

    def _layer(self, layer, h):
        import torch

        length = h.shape[1]
        positions = torch.arange(length)[None]
        mask = torch.full((length, length), float("-inf")).triu(1)[None, None]
        embeddings = self.rotary(h, positions) if self.rotary is not None else None
        out = layer(h, attention_mask=mask, position_ids=positions, position_embeddings=embeddings)
        return out[0] if isinstance(out, tuple) else out


def packed_int_scheme(quantization):
    """compressed-tensors' scheme of a ``pack-quantized`` checkpoint (Kimi-K2.5's INT4 routed experts, group 32);
    NotRebuilt for any other quantization (not guessed)."""
    config = quantization if isinstance(quantization, dict) else quantization.to_dict()
    groups = config.get("config_groups") or {}
    if config.get("format") != "pack-quantized" or len(groups) != 1:
        raise NotRebuilt(f"quantization {config.get('quant_method')!r} format {config.get('format')!r} with "
                         f"{len(groups)} groups: the recompute dequantizes compressed-tensors pack-quantized only")
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme

    group = next(iter(groups.values()))
    return QuantizationScheme(targets=group.get("targets", ["Linear"]), weights=QuantizationArgs(**group["weights"]))


def dequantize(state: dict, scheme) -> dict:
    """Each packed Linear (``<prefix>weight_packed``, ``weight_scale``, ``weight_shape``) as its ``<prefix>weight``,
    by compressed-tensors' own decompressor (the one that packed it); other tensors pass through."""
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor

    out = {k: v for k, v in state.items()}
    for name in [n for n in state if n.endswith("weight_packed")]:
        prefix = name[: -len("weight_packed")]
        parts = {suffix: out.pop(prefix + suffix) for suffix in ("weight_packed", "weight_scale", "weight_shape",
                                                                 "weight_zero_point") if prefix + suffix in out}
        out[prefix + "weight"] = PackedQuantizationCompressor.decompress(parts, scheme)["weight"]
    return out


def fuse_experts(state: dict, module: dict) -> dict:
    """Per-expert checkpoint tensors (``mlp.experts.<e>.gate_proj.weight`` ...) as the fused parameters transformers
    5 layers hold (``mlp.experts.gate_up_proj`` [E, 2I, H], gate first; ``mlp.experts.down_proj`` [E, H, I]),
    as its DeepSeek-V3 conversion mapping merges them; other names pass through."""
    import torch

    out = dict(state)
    for name in module:
        for fused, parts in (("gate_up_proj", ("gate_proj", "up_proj")), ("down_proj", ("down_proj",))):
            if name in out or not name.endswith(f"experts.{fused}"):
                continue
            prefix = name[: -len(fused)]
            count = int(module[name].shape[0])
            keys = [[f"{prefix}{e}.{part}.weight" for part in parts] for e in range(count)]
            if all(k in out for row in keys for k in row):
                out[name] = torch.stack([torch.cat([out.pop(k) for k in row], 0) for row in keys])
    return out
