"""Part (c) of ``--reference self``: decoder layers recomputed from the checkpoint's weights between captured ids.

A captured id ``k`` is the residual entering decoder layer ``k`` (id ``L`` the final pre-norm state), so running
layers ``k_i .. k_{i+1}-1`` over the whole captured sequence of id ``k_i`` (causal, positions 0..T-1) must give
the captured id ``k_{i+1}``; and the embedding of the file's ``token_ids`` run through layers ``0 .. k_0-1`` must
give the first id.  No model is built: transformers' own decoder-layer class is made on the meta device and
each layer's tensors are read from the safetensors one layer at a time (then dropped), so a middle id of a 1T
model is checked with a few layers in memory.

Kimi-K2.5's INT4 routed experts (compressed-tensors ``pack-quantized``) are dequantized by compressed-tensors'
own decompressor as each layer is read: the weights vLLM's INT4 kernel multiplies by.

What it catches that the logits and the twin cannot: a row of the right shape from the wrong layer (an id
shifted by one), a row scaled or normed in every request alike (deterministic, so the twin agrees), rows of
another request or stale rows (K13's never-saved final chunk) in the middle ids, which the final row's logits do
not see.  What it cannot: a fault that makes id k_i and id k_{i+1} wrong in the same consistent way (e.g. both
rows copied from the same wrong request) -- the embedding check anchors the first id to the tokens, the logits
the last one, and the chain between.

Cost: ``plan`` picks the pairs.  Every layer read costs its bytes; the budget is a share of the checkpoint's
bytes (``BUDGET_SHARE``, 0.1 = at most a tenth of a model load, P6), never less than ``FLOOR_BYTES`` (a tiny
model is checked whole).  The embedding check comes first, then pairs one layer apart (an id and the next,
which ``self_ids`` adds to the capture for each requested id), then longer pairs, cheapest first; a pair over
the budget is reported as not recomputed, never as passed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

BUDGET_SHARE = 0.1
FLOOR_BYTES = 64 << 20
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


def self_ids(ids: list[int], depth: int) -> list[int]:
    """The ids confirm captures for ``--reference self``: each requested id and the next one (k and k+1, k < L),
    so every requested middle id is the input of a one-layer recompute; ascending, unique."""
    return sorted({*ids, *(k + 1 for k in ids if k < depth)})


@dataclass(frozen=True)
class Step:
    start: int  # the id recomputed from (-1: the embedding of the tokens)
    end: int  # the id compared with
    layers: tuple  # decoder layers run
    bytes: int


def plan(index: WeightIndex, ids: list[int], budget_bytes: int | None = None) -> tuple[list[Step], list[Step]]:
    """``(steps to run, steps over budget)``: the embedding step first, then pairs cheapest first."""
    ids = sorted(ids)
    if budget_bytes is None:
        budget_bytes = max(int(BUDGET_SHARE * index.total_bytes), FLOOR_BYTES)
    embed = index.sizes.get(_embedding_name(index), 0)
    steps = [Step(-1, ids[0], tuple(range(ids[0])), embed + sum(index.layer_bytes(i) for i in range(ids[0])))]
    pairs = [Step(a, b, tuple(range(a, b)), sum(index.layer_bytes(i) for i in range(a, b)))
             for a, b in zip(ids, ids[1:])]
    chosen, over, spent = [], [], 0
    for step in steps + sorted(pairs, key=lambda s: (len(s.layers), s.start)):
        if spent + step.bytes <= budget_bytes:
            chosen.append(step)
            spent += step.bytes
        else:
            over.append(step)
    return chosen, over


def _embedding_name(index: WeightIndex) -> str:
    try:
        return index.named("embed_tokens.weight")
    except NotRebuilt:
        return ""


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

    def run(self, sequences: list, layers) -> list:
        """Each of ``sequences`` ([T, H], entering ``layers[0]``) through ``layers`` in turn (causal, positions
        0..T-1); one layer's weights in memory at a time, read once for all sequences."""
        import torch

        states = [rows.float()[None] for rows in sequences]
        for number in layers:
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
            with torch.no_grad():
                states = [self._layer(layer, h) for h in states]
            layer.to("meta")
        return [h[0] for h in states]

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


def relative(got, want) -> float:
    """max|got - want| / mean|want|: the row tolerance's measure (compat.serve.checks)."""
    scale = float(want.float().abs().mean()) or 1.0
    return float((got.float() - want.float()).abs().max()) / scale


def check(model: str, files, ids: list[int], budget_bytes: int | None = None, index: WeightIndex | None = None):
    """``{step name: worst relative error over files}``, the steps over budget, and the bytes read.

    ``files``: ``[(token_ids, hidden_states [T, len(ids), H])]``, rows in ascending ``ids`` order."""
    import torch

    index = index or WeightIndex.of(model)
    chosen, over = plan(index, ids, budget_bytes)
    layers = Layers(model, index)
    order = sorted(ids)
    worst: dict[str, float] = {}
    for step in chosen:
        if step.start < 0:
            starts = layers.embed([tokens for tokens, _ in files])
        else:
            starts = [states[:, order.index(step.start), :] for _, states in files]
        results = layers.run(starts, step.layers) if step.layers else starts
        name = f"{'embedding' if step.start < 0 else step.start}->{step.end}"
        worst[name] = max((relative(got, states[:, order.index(step.end), :])
                           for got, (_, states) in zip(results, files)), default=0.0)
    return worst, over, index


def checkpoint_config(model: str) -> dict:
    config = json.loads((Path(model) / "config.json").read_text())
    return config.get("text_config") or config
