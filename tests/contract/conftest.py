"""Contract fixtures: a tiny model built in-lane and one harness report per cell, read by every test.

One harness process (``--mode cell``, tests/contract/harness.py) imports vLLM, torch and transformers once and
executes the cell's declared runs: each generator run in a child forked from it (speculators imported fresh
each time), its vLLM worker forked from that child, an engine start of ~2 s instead of ~10 s of spawned imports.
The runs whose claim is about spawning (the patches that cannot show on this CPU, left out together; the
thread-binding proof) and the real ``compat confirm`` command line keep vLLM's spawned workers.  Each proof
imports the variant the kit wrote from a copy beside the install, so the runs go side by side; each run has its
own output, vLLM log, result and raw captures.  The tests only read the report and those files, and parts no
selected test asks for are not run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compat.layout import cache_root
from compat.vllm_log import root_cause

ROOT = Path(__file__).resolve().parents[2]
CACHE = cache_root()

# On two shared cores a second OpenMP thread in the driving process (Hugging Face's reference, the comparisons)
# spin-waits against vLLM's worker: the reference took 18 s instead of 1.4 s.  vLLM's worker binds its own
# threads (VLLM_CPU_OMP_THREADS_BIND).  Workers that outlive shutdown get SIGTERM after 1 s instead of 5 s.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS", "1")


#: the modern path's tests: a real `vllm serve` and speculators >= 0.5, so a lane of the other path deselects them
SERVE = ("the modern path: a real `vllm serve` + speculators >= 0.5's client (not in -m contract; run with -m serve "
         "in a serve lane: python3 fixtures/lanes.py test --no-unit serve)")


def pytest_configure(config):
    config.addinivalue_line("markers", f"serve: {SERVE}")


def pytest_collection_modifyitems(config, items):
    for item in items:
        where = str(item.fspath).replace(os.sep, "/")
        if "tests/contract" in where:
            if "tests/contract/serve/" in where:
                item.add_marker(pytest.mark.serve)
                continue  # the modern path: selected with -m serve, not by -m contract (an old-path lane)
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
    # the checkout first; a lane installed on PYTHONPATH (the GPU lane's unpacked payload) stays behind it
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}
    proc = subprocess.run([sys.executable, "-m", "tests.contract.harness", "--model", model, "--out", str(out), *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    if proc.returncode != 0 or not out.exists():
        raise AssertionError(f"harness failed ({proc.returncode}); root cause: {root_cause(proc.stdout + proc.stderr)}\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
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
def engine_device(cell_report) -> str:
    """The device type vLLM's platform resolved in the cell's harness ("cpu" in the CPU lanes, "cuda" on the GPU
    lane): pytest's own process never imports vLLM."""
    return cell_report["device_type"]


@pytest.fixture(scope="session")
def device_rtol(engine_device) -> float:
    """The float32 per-layer bound on this device (compat.shared.tolerance): CPU 1e-3, CUDA (TF32 attention) 2e-2."""
    from compat.confirm import choose

    return choose("float32", engine_device).rtol


@pytest.fixture
def keep_figures(request):
    """``keep_figures(figures) -> figures``: the measurement a test judges, kept beside its outcome in the cell's
    record (compat.shared.figures), so a later bound judges the record again without running vLLM again."""
    from compat.shared.figures import keep

    return lambda figures: keep(request.node.nodeid, figures)


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


def _requested(session) -> set:
    return {name for item in session.items for name in getattr(item, "fixturenames", ())}


@pytest.fixture(scope="session")
def cell_report(tiny_model, tmp_path_factory, request):
    """One harness process: pristine (reverted first), reverted after an apply, patched with the runtime checks,
    bf16 and the proofs.

    The proofs leave out each needed patch in turn; those that cannot show here share one observed run.
    The revert re-run, bf16 and the proofs run only when a selected test needs them
    (``-m "contract and not proof"``).
    """
    from tests.contract.test_patch_proofs import UNOBSERVABLE_ON_CPU

    wanted = _requested(request.session)
    optional = (("reverted", "reverted_report"), ("bf16", "bf16_report"), ("proofs", "proofs_report"),
                ("confirm", "confirm_report"), ("binding", "binding_report"), ("proofs", "binding_report"))
    parts = list(dict.fromkeys(["pristine", "patched"] + [part for part, fixture in optional if fixture in wanted]))
    together = [arg for pid in UNOBSERVABLE_ON_CPU for arg in ("--together", pid)]
    return harness(tmp_path_factory.mktemp("cell") / "r.json", tiny_model, "--mode", "cell", "--parts",
                   ",".join(parts), *together)


def _view(cell: dict, part: str) -> dict:
    shared = {k: cell[k] for k in ("layers", "rtol", "tolerance", "log", "hf_seconds") if k in cell}
    return {**shared, **cell[part]}


@pytest.fixture(scope="session")
def pristine_report(cell_report):
    """The generator exactly as installed, before any patch (reverted first)."""
    return _view(cell_report, "pristine")


@pytest.fixture(scope="session")
def reverted_report(cell_report):
    """After `compat.apply` then `compat.apply --revert`: the files' sha256 both times, and the generator run again."""
    return cell_report["reverted"]


@pytest.fixture(scope="session")
def patched_report(cell_report):
    """After `python -m compat.apply`: HF comparison plus runtime observation of the probes."""
    return {**_view(cell_report, "patched"), "static_api": cell_report["static_api"]}


@pytest.fixture(scope="session")
def proofs_report(cell_report):
    """Leave-one-out over every needed patch; those that cannot show here share one observed run."""
    return cell_report["proofs"]


@pytest.fixture(scope="session")
def confirm_report(cell_report):
    """compat confirm's runs on the patched lane (tests/contract/confirm_runs.py): the command line, --reference none,
    vllm-extract (vLLM >= 0.17), --pipeline-parallel-size 2, a killed worker, a killed worker while busy."""
    return cell_report["confirm"]


@pytest.fixture(scope="session")
def bf16_report(cell_report):
    """The patched generator run in bfloat16 and compared with HF float32: the tolerance must reject it."""
    return _view(cell_report, "bf16")


@pytest.fixture(scope="session")
def binding_report(cell_report):
    """How vLLM bound the worker's threads by default (no VLLM_CPU_* binding variable set), observed inside it in
    two spawned proof runs: p36 left out (its own proof), and the run that leaves out what cannot show here (p36
    applied).  None where the cell has no such pair (then the test says why)."""
    return cell_report.get("binding")
