"""How close each token's MoE routing is to a tie, in the Hugging Face reference pass.

Why: a top-k router is a discontinuity of the model.  Where the k-th and (k+1)-th expert scores of a token lie
closer than the rounding of a bfloat16 forward moves them, vLLM in bf16 may pick another expert than HF in
float32, and that token's state differs by O(its scale) from then on: the same size as a capture bug.  The
margin tells the two apart: a row that differs while every router before it had a wide margin cannot be a
routing flip.

Read from the reference pass itself (forward pre-hooks on each router: DeepSeek-V3's and Kimi-K2.5's
``DeepseekV3TopkRouter``, found by its ``e_score_correction_bias``), with the router's own selection rule: sigmoid
scores plus the correction bias, ``n_group`` groups scored by their top-2 sum, ``topk_group`` groups kept, top-k
experts in them.  The margin of a token is the smaller of the expert gap (k-th minus (k+1)-th selection score
inside the kept groups) and, with more than one group, the group gap.
"""

from __future__ import annotations


def routers(model) -> list[tuple[int, object]]:
    """``[(decoder layer index, router module)]`` of every MoE router with a selection bias in ``model``."""
    import re

    found = []
    for name, module in model.named_modules():
        if getattr(module, "e_score_correction_bias", None) is None or not hasattr(module, "weight"):
            continue
        match = re.search(r"layers\.(\d+)\.", name + ".")
        if match:
            found.append((int(match.group(1)), module))
    return sorted(found, key=lambda item: item[0])


def margins(module, hidden) -> "object":
    """The per-token routing margin of one router on its input ``hidden`` (``[..., H]``): float32 ``[tokens]``, or
    None where the router's top-k cannot be read."""
    import torch

    with torch.no_grad():
        return _margins(module, hidden)


def _margins(module, hidden):
    import torch

    config = getattr(module, "config", None)  # transformers 5.8: the router keeps only its config; 5.17+: attributes
    top_k = getattr(module, "top_k", None) or getattr(config, "num_experts_per_tok", None)
    if not top_k:
        return None  # the router's k cannot be read: no margin rather than a guessed one
    groups = int(getattr(module, "num_group", None) or getattr(config, "n_group", None) or 1)
    keep = int(getattr(module, "topk_group", None) or getattr(config, "topk_group", None) or 1)
    top_k = int(top_k)
    logits = torch.nn.functional.linear(hidden.reshape(-1, hidden.shape[-1]).float(), module.weight.float())
    scores = logits.sigmoid() + module.e_score_correction_bias.float()
    experts = scores.shape[-1]
    if groups > 1:
        group_scores = scores.view(-1, groups, experts // groups).topk(2, dim=-1)[0].sum(-1)
        ordered = group_scores.sort(dim=-1, descending=True)[0]
        group_gap = ordered[:, keep - 1] - ordered[:, keep]
        kept = group_scores.topk(keep, dim=-1)[1]
        mask = torch.zeros_like(group_scores).scatter_(1, kept, 1.0).repeat_interleave(experts // groups, dim=-1)
        scores = scores.masked_fill(mask == 0, float("-inf"))
    else:
        group_gap = None
    ordered = scores.sort(dim=-1, descending=True)[0]
    gap = ordered[:, top_k - 1] - ordered[:, top_k]
    return gap if group_gap is None else torch.minimum(gap, group_gap)


class MarginRecorder:
    """Forward pre-hooks that keep, per reference forward, each router's margins: ``take() -> {layer: [T]}``."""

    def __init__(self, model):
        self._seen: dict[int, object] = {}
        self._hooks = [module.register_forward_pre_hook(self._hook(layer)) for layer, module in routers(model)]

    def _hook(self, layer: int):
        def record(module, args):
            found = margins(module, args[0])
            if found is not None:
                self._seen[layer] = found.detach().cpu()
        return record

    @property
    def active(self) -> bool:
        return bool(self._hooks)

    def take(self) -> dict:
        seen, self._seen = self._seen, {}
        return seen

    def remove(self) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []


def min_margin_upto(per_layer: dict, last_layer: int, token: int) -> float | None:
    """The smallest margin of ``token`` over the routers of decoder layers ``<= last_layer`` (None: no router)."""
    values = [float(m[token]) for layer, m in per_layer.items() if layer <= last_layer and token < len(m)]
    return min(values) if values else None
