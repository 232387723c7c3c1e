"""What each serve-path file must satisfy, as plain functions returning problems (empty list: fine).

Tolerance per row, as compat confirm's: ``max|diff| / mean|h_ref|`` of that
layer, so a small early layer and a large late one are held to the same
relative bound (an absolute atol is too tight at |h| ~ 0.02 and too loose at
|h| ~ 10).
"""

from __future__ import annotations

KEYS = {"hidden_states", "token_ids"}


def file_problems(data: dict, prompt: list[int], rows: int, hidden: int, dtype) -> list[str]:
    """Keys, ``token_ids == prompt``, shape ``[T, N, H]`` and dtype of one file."""
    problems = []
    if set(data) != KEYS:
        problems.append(f"keys {sorted(data)} (expected {sorted(KEYS)})")
        return problems
    if data["token_ids"].tolist() != list(prompt):
        problems.append(f"token_ids differ from the prompt ({len(data['token_ids'])} vs {len(prompt)} tokens)")
    shape = tuple(data["hidden_states"].shape)
    if shape != (len(prompt), rows, hidden):
        problems.append(f"hidden_states shape {shape}, expected {(len(prompt), rows, hidden)}")
    if data["hidden_states"].dtype != dtype:
        problems.append(f"hidden_states dtype {data['hidden_states'].dtype}, expected {dtype}")
    return problems


def row_errors(states, reference, ids: list[int]) -> dict[int, float]:
    """``{id: max|diff| / mean|ref|}`` per stored row (both ``[T, N, H]``, rows in ``ids`` order)."""
    import math

    errors = {}
    for i, k in enumerate(ids):
        got, want = states[:, i, :].float(), reference[:, i, :].float()
        scale = float(want.abs().mean()) or 1.0
        err = float((got - want).abs().max()) / scale
        errors[k] = err if math.isfinite(err) else float("inf")  # a NaN row fails, never passes
    return errors


def untied_row_errors(states, reference, ids: list[int], margins: dict | None, tie: float, bound: float):
    """``({id: worst max|diff| / mean|ref| over rows no routing tie explains}, {id: rows set aside})``.

    Modern-path id ``k`` is the residual entering decoder layer ``k``: the routers of layers ``< k`` decided it.  A
    row over ``bound`` is set aside only where its token's MoE routing margin in HF (compat.shared.routing) was
    ``<= tie`` at one of them: bf16 may route that token to another expert than float32 (docs/gpu/moe).  Rows within
    the bound are judged (and pass) whatever their margin, so the count is of rows the rule really excused.
    """
    from compat.shared.routing import min_margin_upto

    worst, excused = {}, {}
    for i, k in enumerate(ids):
        got, want = states[:, i, :].float(), reference[:, i, :].float()
        scale = float(want.abs().mean()) or 1.0
        rows = [e if e == e and e != float("inf") else float("inf")
                for e in ((got - want).abs().amax(-1) / scale).tolist()]  # NaN rows fail, never pass
        kept = []
        for token, err in enumerate(rows):
            margin = min_margin_upto(margins, k - 1, token) if margins else None
            if margin is not None and margin <= tie and err > bound:
                excused[k] = excused.get(k, 0) + 1
            else:
                kept.append(err)
        worst[k] = max(kept, default=0.0)
    return worst, excused


def logprob_error(rebuilt, prompt_logprobs: list, prompt: list[int], after_last: dict | None = None):
    """Largest |rebuilt - served| over every logprob the server returned; (error, count).

    Position ``t``'s distribution comes from the row of token ``t - 1``: the server's ``prompt_logprobs[t]`` holds
    the prompt token's logprob and its top-k, keyed by token id, for ``t`` in 1..T-1; ``after_last`` (``{token id:
    logprob}``, the first generated token's top-k) is the distribution of the last row, ``T - 1``.  A non-finite
    rebuilt value is an error of ``inf``, never skipped.
    """
    import math

    worst, count = 0.0, 0
    targets = [(t - 1, prompt_logprobs[t] or {}) for t in range(1, len(prompt))]
    if after_last:
        targets.append((len(prompt) - 1, after_last))
    for row, entry in targets:
        for token, item in entry.items():
            value = item["logprob"] if isinstance(item, dict) else item
            diff = abs(float(rebuilt[row, int(token)]) - float(value))
            worst = max(worst, diff if math.isfinite(diff) else float("inf"))
            count += 1
    return worst, count
