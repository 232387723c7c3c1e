"""A SIGKILL at any moment of apply leaves every file pristine or fully patched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from compat.declaration import Edit, Patch
from compat.patcher import Patcher, open_target
from compat.registry import Decision
from fixtures.synthetic import make_dist

ROOT = Path(__file__).resolve().parents[2]
N = 150


def pristine() -> dict[str, bytes]:
    return {f"big/m{i:03}.py": f"VALUE = {i}\n".encode() for i in range(N)} | {"big/__init__.py": b""}


def patched(relpath: str, data: bytes) -> bytes:
    return data.replace(b"VALUE = ", b"VALUE = 1000 + ") if relpath != "big/__init__.py" else data


def big_patch() -> Patch:
    edits = {f"big/m{i:03}.py": (Edit("VALUE = ", "VALUE = 1000 + "),) for i in range(N)}
    return Patch(id="big.all", title="t", why="t", how="t", upstream="-", removal="-", target="big",
                 versions={}, requires={}, edits={"v": edits})


def apply(site: Path):
    Patcher(open_target("big", site)).apply([Decision(big_patch(), "needed", "", "v")], "fp")


def _spawn(site: Path) -> subprocess.Popen:
    code = f"from pathlib import Path; from tests.unit.test_sigkill import apply; apply(Path({str(site)!r}))"
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})


def _check(site: Path) -> set[str]:
    states = set()
    for relpath, data in pristine().items():
        now = (site / relpath).read_bytes()
        assert now in (data, patched(relpath, data)), f"{relpath} is torn: {now!r}"
        states.add("patched" if now != data else "pristine")
    return states


def test_sigkill_during_apply_never_tears_a_file(tmp_path):
    site = tmp_path / "ref"
    make_dist(site, "big", "1.0", pristine())
    start = time.monotonic()
    proc = _spawn(site)
    assert proc.wait(timeout=120) == 0
    full = time.monotonic() - start
    seen = set()
    for k in range(8):
        run_site = tmp_path / f"s{k}"
        make_dist(run_site, "big", "1.0", pristine())
        proc = _spawn(run_site)
        time.sleep(full * (k + 1) / 9)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        seen |= _check(run_site)
        apply(run_site)  # a later apply recovers and completes
        for relpath, data in pristine().items():
            assert (run_site / relpath).read_bytes() == patched(relpath, data)
    assert seen  # at least one state observed
