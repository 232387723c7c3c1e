"""Part (c) of ``--reference self``: every decoder layer recomputed from the checkpoint's weights, in one pass.

A captured id ``k`` is the residual entering decoder layer ``k`` (id ``L`` the final pre-norm state).  The chain
starts at the embedding of each file's ``token_ids`` and runs layer 0, 1, ... in order up to the last captured id.
Each time it reaches a captured id it compares what it computed with the captured rows (every position), then
continues from the *captured* rows: so every step ``k_i -> k_(i+1)`` is judged on its own (one engine's bf16
rounding never piles up over 61 layers), and every layer between the embedding and the last id is run.  A step
that is not run is never passed: the whole chain is always walked, and the layers come from
:mod:`compat.serve.layers`, which raises ``NotRebuilt`` (reported as not looked at) where it cannot read them.

Each layer's weights are read once, streamed: loaded, run over every sampled file, dropped.  The cost is bytes
(every layer up to the last id is read once: a model load's worth of reading, spread over one pass) and compute
(tokens x layers).  Where the token budget binds, files are sampled, never steps: all positions of each sampled
file, the longest file always included, the rest in a seeded order; the report says which were left out.

What the chain catches: a row of the right shape from the wrong layer, a row scaled or normed in every request
alike, rows of another request, stale or zeroed rows at any id (zeros are judged against the recomputed rows'
scale, so a zeroed pair cannot pass a step by mapping zeros to zeros: the step into it fails).  What it cannot
see: a fault that makes the first captured id wrong exactly as the embedding would -- nothing, the embedding
step anchors it to the tokens.

MoE routers are discontinuities: where a token's top-k margin in a step's layers is within one rounding step of
the engine's dtype (compat.shared.tolerance.routing_tie), a float32 recompute may route it otherwise than the
engine did, and that row, where it is over the bound, is excused -- counted, and capped: past ``EXCUSE_CEILING`` of an id's rows the step
cannot vouch for that id, and the report says so (not looked at, never OK).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from compat.shared.tolerance import EXCUSE_CEILING

from .layers import Layers, NotRebuilt, WeightIndex  # noqa: F401 (NotRebuilt re-exported for callers)

#: Tokens recomputed through every layer before files are sampled: the serve path's default prompts (11 + 33 with a
#: long one, ~3.5k tokens) fit whole; a user's own large prompt set is sampled, all positions of each file.
TOKEN_BUDGET = 8192
TOKEN_BUDGET_NOW = object()  # check()'s default: TOKEN_BUDGET read when it runs
SAMPLE_SEED = 0


def self_ids(ids: list[int], depth: int) -> list[int]:
    """The ids confirm captures for ``--reference self``: each requested id and the next one (k and k+1, k < L),
    so every requested middle id is the input of a one-layer recompute; ascending, unique."""
    return sorted({*ids, *(k + 1 for k in ids if k < depth)})


@dataclass(frozen=True)
class Step:
    start: int  # the id recomputed from (-1: the embedding of the tokens)
    end: int  # the id compared with
    layers: tuple  # decoder layers run

    @property
    def name(self) -> str:
        return f"{'embedding' if self.start < 0 else self.start}->{self.end}"


def steps(ids: list[int]) -> list[Step]:
    """Every step of the chain: the embedding to the first id, then each id to the next."""
    order = sorted(set(ids))
    starts = [-1, *order[:-1]]
    return [Step(a, b, tuple(range(max(a, 0), b))) for a, b in zip(starts, order)]


def sample(lengths: list[int], token_budget: int | None) -> list[int]:
    """Indices of the files recomputed: all while they fit ``token_budget``; else the longest first, then a seeded
    shuffle of the rest, each taken while it still fits (ascending)."""
    everything = list(range(len(lengths)))
    if token_budget is None or sum(lengths) <= token_budget:
        return everything
    longest = max(everything, key=lambda i: lengths[i])
    rest = [i for i in everything if i != longest]
    random.Random(SAMPLE_SEED).shuffle(rest)
    chosen, spent = [longest], lengths[longest]
    for i in rest:
        if spent + lengths[i] <= token_budget:
            chosen.append(i)
            spent += lengths[i]
    return sorted(chosen)


@dataclass
class Chain:
    """What the chain measured: per step the worst row error over the files it ran, rows excused at a routing tie."""

    steps: list = field(default_factory=list)  # Step, in chain order
    worst: dict = field(default_factory=dict)  # step name -> worst max|diff| / mean|recomputed| over judged rows
    rows: dict = field(default_factory=dict)  # step name -> rows compared
    excused: dict = field(default_factory=dict)  # step name -> rows over the bound at a routing tie (set aside)
    files: list = field(default_factory=list)  # indices of the files recomputed
    files_total: int = 0
    tokens: int = 0
    layers_run: int = 0
    read_bytes: int = 0
    total_bytes: int = 0
    seconds: float = 0.0
    device: str = "cpu"

    def over_ceiling(self) -> dict:
        """``{step name: share of its rows excused}`` where that share passes EXCUSE_CEILING."""
        return {name: round(n / self.rows[name], 4) for name, n in self.excused.items()
                if self.rows.get(name) and n / self.rows[name] > EXCUSE_CEILING}


def row_errors(got, want) -> "object":
    """Per row (position) ``max|got - want| / mean|want|`` over ``[T, H]``; a non-finite row is ``inf``."""
    import torch

    got, want = got.float(), want.float()
    scale = float(want.abs().mean())
    if not scale or not torch.isfinite(torch.tensor(scale)):
        scale = 1.0
    errors = (got - want).abs().amax(-1) / scale
    bad = ~torch.isfinite(got).all(-1)
    return errors.masked_fill(bad | ~torch.isfinite(errors), float("inf"))


def relative(got, want) -> float:
    """max|got - want| / mean|want| over the whole ``[T, H]`` (non-finite: inf)."""
    return float(row_errors(got, want).max()) if got.numel() else 0.0


class _Margins:
    """Forward pre-hooks on one loaded layer's MoE routers: the smallest top-k margin each token met in a step."""

    def __init__(self):
        self.low: list = []  # per sampled file: [T] smallest margin since the last captured id (None: no router)
        self._hooks: list = []
        self._file = 0

    def attach(self, layer) -> None:
        from compat.shared.routing import margins

        def hook(module, args):
            found = margins(module, args[0])
            if found is None:
                return
            found = found.detach().float().cpu().reshape(-1)
            current = self.low[self._file]
            self.low[self._file] = found if current is None else current.minimum(found)

        for module in layer.modules():
            if getattr(module, "e_score_correction_bias", None) is not None and hasattr(module, "weight"):
                self._hooks.append(module.register_forward_pre_hook(hook))

    def detach(self) -> None:
        for handle in self._hooks:
            handle.remove()
        self._hooks = []

    def on_file(self, index: int) -> None:
        self._file = index

    def reset(self, files: int) -> None:
        self.low = [None] * files


def check(model: str, files, ids: list[int], *, bound: float, tie: float | None = None, token_budget=TOKEN_BUDGET_NOW,
          trust_remote_code: bool = False, index: WeightIndex | None = None, device: str | None = None) -> Chain:
    """Walk the whole chain over ``files`` (``[(token_ids, hidden_states [T, len(ids), H])]``, rows in ascending
    ``ids`` order); raises NotRebuilt where the layers cannot be rebuilt.  ``tie``: the routing margin under which a
    row over ``bound`` is set aside (None: none is).  ``token_budget``: None for every file; by default the module's
    TOKEN_BUDGET as it is at the call."""
    if token_budget is TOKEN_BUDGET_NOW:
        token_budget = TOKEN_BUDGET
    started = time.monotonic()
    index = index or WeightIndex.of(model)
    order = sorted(ids)
    layers = Layers(model, index, trust_remote_code=trust_remote_code, device=device)
    chosen = sample([len(tokens) for tokens, _ in files], token_budget)
    picked = [files[i] for i in chosen]
    chain = Chain(steps=steps(order), files=chosen, files_total=len(files),
                  tokens=sum(len(tokens) for tokens, _ in picked), total_bytes=index.total_bytes,
                  device=str(getattr(layers, "device", device or "cpu")))
    by_end = {step.end: step for step in chain.steps}
    margins = _Margins()
    margins.reset(len(picked))
    state = layers.embed([tokens for tokens, _ in picked])
    for number in range(order[-1] + 1):
        if number in by_end:
            step = by_end[number]
            captured = [states[:, order.index(number), :] for _, states in picked]
            _judge(chain, step, state, captured, margins.low, tie, bound)
            state = [rows.float() for rows in captured]
            margins.reset(len(picked))
        if number == order[-1]:
            break
        layer = layers.load(number)
        margins.attach(layer)
        try:
            out = []
            for position, rows in enumerate(state):
                margins.on_file(position)
                out.append(layers.forward(layer, rows))
            state = out
        finally:
            margins.detach()
            layers.unload(layer)
        chain.layers_run += 1
    chain.read_bytes = index.read_bytes
    chain.seconds = round(time.monotonic() - started, 2)
    return chain


def _judge(chain: Chain, step: Step, computed: list, captured: list, low: list, tie: float | None,
           bound: float) -> None:
    """The step's worst row error over every position of every sampled file; rows over ``bound`` at a routing tie
    set aside and counted."""
    worst, rows, excused = 0.0, 0, 0
    for want, got, margin in zip(computed, captured, low):
        errors = row_errors(got, want)
        if tie is not None and margin is not None and len(margin) == len(errors):
            tied = (margin <= tie) & (errors > bound)
            excused += int(tied.sum())
            errors = errors[~tied]
        rows += len(got)
        if len(errors):
            worst = max(worst, float(errors.max()))
    chain.worst[step.name] = worst
    chain.rows[step.name] = rows
    if excused:
        chain.excused[step.name] = excused
