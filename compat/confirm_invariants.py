"""Checks of the generator's results that need no reference model (always run, also with ``--reference none``).

Per call:
    * result order: result ``i`` carries the ``input_ids`` of prompt ``i``;
    * shapes: every captured layer is ``[len(prompt), hidden_size]``, one tensor per asked layer;
    * all values finite.

Across calls (two extra calls confirm appends after ``--calls``):
    * repeat: the first call, run again with the same prompts, gives bit-identical states;
    * batch: the first call's first prompt alone equals the same prompt inside a batch of 33
      (at position 16), per layer ``max|diff| / mean|h_alone| <= rtol``.
"""

from __future__ import annotations

#: Where the probe prompt sits in the 33-sequence invariant call (not first, not last).
BATCH_SIZE, BATCH_POSITION = 33, 16


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
