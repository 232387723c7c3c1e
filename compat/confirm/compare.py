"""Pure numerics of ``compat confirm``: every captured layer against a reference, and the checks that need none.

No vLLM here (torch only), so all of it is unit-tested on plain tensors.

Layer-index semantics: generator layer id ``k`` is the output of decoder layer ``k`` (hidden + residual, before
the final norm), which is HF ``hidden_states[k + 1]``.  HF's last entry has the final norm applied, so when the
reference carries a model (``Reference.holder``) the generator's last layer is passed through its final norm first.

Per layer and call three statistics are kept:

``rel_diff``  ``max|diff| / mean|h_ref|``: the worst element against the layer's own scale; the judged one.
``nrms``      ``||diff||_2 / ||h_ref||_2``: normalised RMS error, not dominated by one massive activation.
``min_cos``   the smallest cosine similarity of a token's state with the reference's, over the call's tokens.

Invariants (always, also with ``--reference none``): per call result order, shapes and finite values; across
calls the first call repeated is bit-identical, and its first prompt alone equals the same prompt inside a batch
of 33 (at position 16) within the bound.
"""

from __future__ import annotations

from typing import NamedTuple

from compat.shared.tolerance import EXCUSE_CEILING, RTOL

#: Where the probe prompt sits in the 33-sequence invariant call (not first, not last).
BATCH_SIZE, BATCH_POSITION = 33, 16


class Reference(NamedTuple):
    """What every captured layer is compared with.


    ``holder``: a model whose ``.model.norm`` is the final norm (HF: its last ``hidden_states`` entry is normed,
    so the generator's last layer is normed to match), or None (the reference is pre-norm, or absent);
    ``refs[tuple(prompt)]``: float32 ``[tokens, hidden]`` tensors in ``layers`` order, or None (no reference:
    invariants only); ``depth``: the model's number of decoder layers.  A plain ``(holder, refs, depth)`` triple
    is the same thing.
    """

    holder: object
    refs: dict | None
    depth: int


class RoutedReference(Reference):
    """A ``Reference`` that also carries the MoE routing margins of its pass, still a triple to unpack.

    ``routing[tuple(prompt)]``: ``{decoder layer: float32 [tokens]}`` (compat.shared.routing), or None.
    """

    def __new__(cls, holder, refs, depth, routing=None):
        self = super().__new__(cls, holder, refs, depth)
        self.routing = routing
        return self

    def __getnewargs__(self):  # pickled across the harness's processes with its margins
        return (*self, self.routing)


def invariant_calls(first_call: list[list[int]], fillers: list[list[int]]) -> tuple[list[list[int]], list[list[int]]]:
    """The two calls appended after the user's: a batch of 33 holding ``first_call[0]``, then ``first_call`` again."""
    probe = first_call[0]
    others = [fillers[i % len(fillers)] for i in range(BATCH_SIZE - 1)]
    batch = others[:BATCH_POSITION] + [probe] + others[BATCH_POSITION:]
    return batch, [list(p) for p in first_call]


def check_results(results, prompts, layers, hidden_size: int | None) -> list[str]:
    """Order, shape and finiteness problems of one call's results (empty when all hold)."""
    import torch

    problems = []
    if len(results) != len(prompts):
        problems.append(f"{len(results)} results for {len(prompts)} prompts")
    for i, (result, prompt) in enumerate(zip(results, prompts)):
        ids = result["input_ids"]
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        if ids != list(prompt):
            problems.append(f"result {i}: input_ids are another prompt's (order)")
        states = result["hidden_states"]
        if len(states) != len(layers):
            problems.append(f"result {i}: {len(states)} layers captured, asked for {len(layers)}")
        for k, tensor in zip(layers, states):
            want = (len(prompt), hidden_size) if hidden_size else None
            shape = tuple(tensor.shape)
            if len(shape) != 2 or (want and shape != want) or shape[0] != len(prompt):
                problems.append(f"result {i} layer {k}: shape {shape}, expected {want or ('tokens', 'hidden')}")
            elif not bool(torch.isfinite(tensor).all()):
                problems.append(f"result {i} layer {k}: {int((~torch.isfinite(tensor)).sum())} non-finite values")
    return problems


#: How many of the worst rows a layer's stats name (result, token, error, routing margins).
OUTLIER_ROWS = 8


class LayerError:
    """The three statistics of one layer, accumulated over the tensors of a call, and its rows over the bound.

    Rows: per token ``max|diff|`` over the hidden size, so the report can say which tokens of which results
    exceed the bound (a capture bug shows whole files or tails; a routing flip, scattered tokens).
    """

    def __init__(self):
        self.worst, self.abs_sum, self.count, self.diff_sq, self.ref_sq, self.min_cos = 0.0, 0.0, 0, 0.0, 0.0, 1.0
        self.rows: list[tuple[int, object, dict | None]] = []  # (result index, per-token max|diff|, margins)

    def add(self, got, ref, result: int = -1, margins: dict | None = None) -> None:
        import torch

        diff = (got - ref).double()
        if diff.dim() == 2:
            self.rows.append((result, diff.abs().amax(-1).float(), margins))
        self.worst = max(self.worst, diff.abs().max().item())
        self.abs_sum += ref.abs().double().sum().item()
        self.count += ref.numel()
        self.diff_sq += diff.pow(2).sum().item()
        self.ref_sq += ref.double().pow(2).sum().item()
        cos = torch.nn.functional.cosine_similarity(got.double(), ref.double(), dim=-1)
        self.min_cos = min(self.min_cos, cos.min().item())

    def stats(self, rtol: float | None = None, last_layer: int | None = None, tie: float | None = None) -> dict:
        if not self.count:
            nan = float("nan")
            return {"max_abs_diff": self.worst, "mean_abs_ref": nan, "rel_diff": nan, "nrms": nan, "min_cos": nan}
        mean_ref = self.abs_sum / self.count
        out = {"max_abs_diff": self.worst, "mean_abs_ref": mean_ref,
               "rel_diff": self.worst / mean_ref if mean_ref else float("inf"),
               "nrms": (self.diff_sq / self.ref_sq) ** 0.5 if self.ref_sq else float("inf"),
               "min_cos": self.min_cos}
        if rtol is not None and mean_ref and self.rows:
            out.update(self.rows_over(rtol * mean_ref, mean_ref, last_layer, tie))
        return out

    def rows_over(self, bound: float, scale: float, last_layer: int | None, tie: float | None = None) -> dict:
        """How many rows exceed ``bound``, the worst of them, and (MoE) their routing margins."""
        from compat.shared.routing import min_margin_upto

        over, total = [], 0
        for result, row_max, margins in self.rows:
            total += len(row_max)
            for token in (row_max > bound).nonzero().flatten().tolist():
                over.append((float(row_max[token]) / scale, result, token, margins))
        over.sort(key=lambda item: -item[0])
        named = []
        for rel, result, token, margins in over[:OUTLIER_ROWS]:
            row = {"result": result, "token": token, "rel": round(rel, 4)}
            if margins is not None and last_layer is not None:
                row["margin"] = min_margin_upto(margins, last_layer, token)
                earlier = [min_margin_upto(margins, last_layer, t) for t in range(token)]
                row["margin_before"] = min((m for m in earlier if m is not None), default=None)
            named.append(row)
        out = {"rows": total, "rows_over": len(over), "worst_rows": named}
        if over and over[0][3] is not None and last_layer is not None:
            own = [min_margin_upto(m, last_layer, t) if m is not None else None for _, _, t, m in over]
            out["rows_over_margin_max"] = max((m for m in own if m is not None), default=None)
            if tie is not None:  # rows no routing tie explains: a router with a wide margin, or none at all
                out["rows_over_untied"] = sum(1 for m in own if m is None or m > tie)
                out["routing_tie"] = tie
        return out


def layer_stats(got, ref) -> dict:
    """The statistics of one pair of ``[tokens, hidden]`` tensors (what ``compare`` keeps per layer)."""
    acc = LayerError()
    acc.add(got.float(), ref.float())
    return acc.stats()


def compare(results, prompts, reference, layers, rtol: float = RTOL, hidden_size: int | None = None,
            tie: float | None = None) -> dict:
    """Per-layer error of one call's generator results against ``reference`` (a ``Reference`` or a triple).

    Returns ``{"layers": {k: stats}, "problems": [...], "notes": [...]}``; a layer fails when its ``rel_diff`` over
    the call exceeds ``rtol``, unless the reference carries MoE routing margins and every row over the bound is a
    token whose routing was tied (margin <= ``tie``, compat.shared.tolerance.ROUTING_TIE) at a router up to that
    layer: a bf16 routing flip, said in ``notes``.  With no reference (``refs`` None) only ``check_results`` runs.
    """
    import torch

    holder, refs, depth = reference[:3]
    routing = getattr(reference, "routing", None) or {}
    problems, notes = check_results(results, prompts, layers, hidden_size), []
    if refs is None:
        return {"layers": {}, "problems": problems, "notes": notes}
    acc = {k: LayerError() for k in layers}
    for i, (result, prompt) in enumerate(zip(results, prompts)):
        for j, k in enumerate(layers[: len(result["hidden_states"])]):
            got = result["hidden_states"][j].float()
            if holder is not None and k == depth - 1:  # HF's last entry has the final norm applied
                with torch.no_grad():
                    got = holder.model.norm(got.to(next(holder.parameters()).dtype)).float()
            ref = refs[tuple(prompt)][j]
            if got.shape != ref.shape:
                problems.append(f"result {i} layer {k}: shape {tuple(got.shape)} != reference {tuple(ref.shape)}")
                continue
            acc[k].add(got, ref, i, routing.get(tuple(prompt)))
    # generator id k is the output of decoder layer k: the routers of layers <= k decided it
    stats = {k: acc[k].stats(rtol, last_layer=k, tie=tie if routing else None) for k in layers}
    not_looked_at: list[str] = []
    for k, s in stats.items():
        tied_share = s.get("rows_over", 0) / s["rows"] if s.get("rows") else 0.0
        if acc[k].count and not s["rel_diff"] <= rtol and s.get("rows_over") and s.get("rows_over_untied") == 0 \
                and tied_share > EXCUSE_CEILING:  # too many to set aside: the layer was not judged, so not passed
            not_looked_at.append(f"layer {k}: {s['rows_over']} of {s['rows']} rows over the bound, each at a routing "
                                 f"tie, pass the ceiling of {EXCUSE_CEILING:.0%} of a layer's rows that may be set "
                                 f"aside (worst {s['rel_diff']:.2e} x mean|h_ref|): this layer is not vouched for")
        elif acc[k].count and not s["rel_diff"] <= rtol and s.get("rows_over") and s.get("rows_over_untied") == 0:
            notes.append(f"layer {k}: {s['rows_over']} of {s['rows']} rows over the bound (worst {s['rel_diff']:.2e} "
                         f"x mean|h_ref|), each a token whose MoE routing was tied in the reference (margin <= "
                         f"{s['rows_over_margin_max']:.2e}, tie {tie:.2e}): routing flips, not the capture")
        elif acc[k].count and not s["rel_diff"] <= rtol:
            problems.append(f"layer {k}: max|diff| {s['max_abs_diff']:.3e} = {s['rel_diff']:.2e} x mean|h_ref| "
                            f"> {rtol:g} (nrms {s['nrms']:.2e}, min cos {s['min_cos']:.6f})")
    return {"layers": stats, "problems": problems, "notes": notes, "not_looked_at": not_looked_at}


# -- across calls -------------------------------------------------------------------------------------------------


def states_of(results, index: int) -> list:
    """Result ``index``'s captured layers as float32 copies (kept for the cross-call checks)."""
    return [t.detach().float().clone() for t in results[index]["hidden_states"]]


def compare_repeat(first: list, again: list, layers) -> dict:
    """Bit-identity of two runs of the same call's first prompt: ``{identical, max_abs_diff, problems}``."""
    worst = 0.0
    for a, b in zip(first, again):
        if a.shape != b.shape:
            return {"identical": False, "max_abs_diff": None,
                    "problems": [f"repeat: shapes {tuple(a.shape)} != {tuple(b.shape)}"]}
        worst = max(worst, (a - b).abs().max().item())
    same = worst == 0.0 and len(first) == len(again)
    problems = [] if same else [f"repeat: the same call twice differs, max|diff| {worst:.3e} (layers {list(layers)})"]
    return {"identical": same, "max_abs_diff": worst, "problems": problems}


def compare_batch(alone: list, batched: list, layers, rtol: float) -> dict:
    """The prompt alone vs inside the batch of 33, per layer ``max|diff| / mean|h_alone|``."""
    per_layer, problems = {}, []
    for k, a, b in zip(layers, alone, batched):
        if a.shape != b.shape:
            problems.append(f"batch: layer {k} shapes {tuple(a.shape)} != {tuple(b.shape)}")
            continue
        diff = (a - b).abs().max().item()
        scale = a.abs().mean().item()
        rel = diff / scale if scale else float("inf")
        per_layer[k] = {"max_abs_diff": diff, "rel_diff": rel}
        if not rel <= rtol:
            problems.append(f"batch: layer {k} alone vs in a batch of {BATCH_SIZE}: {rel:.2e} x mean|h| > {rtol:g}")
    return {"layers": per_layer, "problems": problems}


def cross_checks(kept: dict, checks: dict, layers, rtol: float) -> dict:
    """The repeat and alone-vs-batch invariants from the states kept of call 0 and the two invariant calls."""
    doc, problems = {}, []
    if 0 in kept and checks.get("repeat") in kept:
        doc["repeat"] = compare_repeat(kept[0], kept[checks["repeat"]], layers)
        problems += doc["repeat"]["problems"]
    if 0 in kept and checks.get("batch") in kept:
        doc["batch"] = compare_batch(kept[0], kept[checks["batch"]], layers, rtol)
        problems += doc["batch"]["problems"]
    doc["problems"] = problems
    return doc
