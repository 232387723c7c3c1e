"""Contract fixtures: a tiny model built in-lane and harness reports shared across tests.

Every engine start-up costs seconds, so each report below is produced once per
session by one harness process and read by many tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compat.layout import cache_root

ROOT = Path(__file__).resolve().parents[2]
CACHE = cache_root()


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/contract" in str(item.fspath).replace(os.sep, "/"):
            if item.get_closest_marker("mla") or item.get_closest_marker("parallel"):
                continue  # slow MLA/TP/PP runs: selected with -m mla / -m parallel, not by -m contract
            item.add_marker(pytest.mark.contract)


def _lane() -> str:
    return os.environ.get("SPECDEC_COMPAT_LANE", "adhoc")


def compat(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "compat.apply", *args], capture_output=True, text=True, cwd="/")
    if check and proc.returncode != 0:
        raise AssertionError(f"compat.apply {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def harness(out: Path, model: str, *args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "tests.contract.harness", "--model", model, "--out", str(out), *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    if proc.returncode != 0 or not out.exists():
        raise AssertionError(f"harness failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return json.loads(out.read_text())


@pytest.fixture(scope="session")
def vllm_installed():
    from compat.surface import installed_sources

    found = installed_sources()
    missing = [m for m, (dist, _) in found.items() if dist is None]  # transformers too: the model needs it
    if missing:
        pytest.fail(f"contract tests need a lane with {', '.join(missing)} installed: python3 fixtures/lanes.py test")
    return found


@pytest.fixture(scope="session")
def tiny_model(vllm_installed) -> str:
    import transformers

    from fixtures.tiny_model import build_tiny_llama

    path = CACHE / "models" / f"tiny-llama-tf{transformers.__version__}"
    return build_tiny_llama(path)


@pytest.fixture(scope="session")
def surface(vllm_installed):
    from compat.surface import evaluate

    return evaluate(*(vllm_installed[m][1] for m in ("vllm", "speculators", "transformers")))


@pytest.fixture(scope="session")
def pristine_report(tiny_model, tmp_path_factory):
    """The generator exactly as installed, before any patch (revert first)."""
    compat("--revert", "--force")
    return harness(tmp_path_factory.mktemp("pristine") / "r.json", tiny_model, "--calls", "1")


@pytest.fixture(scope="session")
def patched_report(pristine_report, tiny_model, tmp_path_factory):
    """After `python -m compat.apply`: HF comparison plus runtime observation of the probes."""
    compat()
    return harness(tmp_path_factory.mktemp("patched") / "r.json", tiny_model, "--runtime-checks")


@pytest.fixture(scope="session")
def proofs_report(patched_report, tiny_model, tmp_path_factory):
    """Leave-one-out over every needed patch; those that cannot show here share one observed run."""
    from tests.contract.test_patch_proofs import UNOBSERVABLE_ON_CPU

    together = [arg for pid in UNOBSERVABLE_ON_CPU for arg in ("--together", pid)]
    return harness(tmp_path_factory.mktemp("proofs") / "r.json", tiny_model, "--mode", "proofs",
                   "--calls", "1,11,33", *together)["proofs"]


@pytest.fixture(scope="session")
def bf16_report(patched_report, tiny_model, tmp_path_factory):
    """The patched generator run in bfloat16 and compared with HF float32: the tolerance must reject it."""
    return harness(tmp_path_factory.mktemp("bf16") / "r.json", tiny_model, "--dtype", "bfloat16", "--calls", "11")
