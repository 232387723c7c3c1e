"""A SIGKILL at any moment of apply leaves every file pristine or fully patched, and the next run finishes the job.

The child process kills itself (a real SIGKILL) just before its k-th atomic
write, for k spread over the whole run: backups, the write-ahead record, the
package files, the commit.  That lands the kill at known points whatever the
machine's load, so the test can require that some kills really hit the middle
of the file phase (some files written, others not).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import tempfile

from compat.declaration import Edit, Patch
from compat.patcher import Patcher, open_target
from compat.registry import Decision
from fixtures.synthetic import make_dist

ROOT = Path(__file__).resolve().parents[2]
N = 12  # files per patch
X_FILES = [f"big/x{i:03}.py" for i in range(N)]
Y_FILES = [f"big/y{i:03}.py" for i in range(N)]


def pristine() -> dict[str, bytes]:
    return {rel: f"VALUE = {i}\n".encode() for i, rel in enumerate(X_FILES + Y_FILES)} | {"big/__init__.py": b""}


def patched(data: bytes) -> bytes:
    return data.replace(b"VALUE = ", b"VALUE = 1000 + ")


def expected(selected: set[str]) -> dict[str, bytes]:
    out = pristine()
    for pid, files in (("big.x", X_FILES), ("big.y", Y_FILES)):
        if pid in selected:
            for rel in files:
                out[rel] = patched(out[rel])
    return out


def _patch(pid: str, files: list[str]) -> Patch:
    return Patch(id=pid, title="t", why="t", how="t", upstream="-", removal="-", target="big",
                 versions={}, requires={}, edits={"v": {rel: (Edit("VALUE = ", "VALUE = 1000 + "),) for rel in files}})


PATCHES = [_patch("big.x", X_FILES), _patch("big.y", Y_FILES)]


def decisions(selected: set[str]) -> list[Decision]:
    return [Decision(p, "needed" if p.id in selected else "not-needed", "", "v") for p in PATCHES]


def apply(site: Path, selected: set[str]):
    return Patcher(open_target("big", site)).apply(decisions(selected), "fp")


CHILD = """
import os, signal, sys
from pathlib import Path
from compat import patcher, state
from tests.unit.test_sigkill import apply

site, selected, kill_at = Path(sys.argv[1]), set(sys.argv[2].split(",")), int(sys.argv[3])
real = state.atomic_write
count = 0

def counting(*args, **kwargs):
    global count
    count += 1
    if count == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(*args, **kwargs)

state.atomic_write = counting  # every write of the patcher goes through compat.state's atomic_write
if hasattr(patcher, "atomic_write"):  # the one-module patcher imported it by name
    patcher.atomic_write = counting
apply(site, selected)
print(count)
"""


@pytest.fixture
def tmp_path():
    """A tmpfs directory where there is one: a kill does not depend on fsync, and the disk's fsyncs cost minutes here."""
    shm = Path("/dev/shm")
    with tempfile.TemporaryDirectory(dir=shm if shm.is_dir() and os.access(shm, os.W_OK) else None) as tmp:
        yield Path(tmp)


def _child(site: Path, selected: set[str], kill_at: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", CHILD, str(site), ",".join(sorted(selected)), str(kill_at)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def _states(site: Path, before: dict[str, bytes], after: dict[str, bytes]) -> set[str]:
    """Each file is exactly its before or after bytes (never torn); returns which states were seen."""
    seen = set()
    for relpath in before:
        now = (site / relpath).read_bytes()
        assert now in (before[relpath], after[relpath]), f"{relpath} is torn: {now!r}"
        if before[relpath] != after[relpath]:
            seen.add("after" if now == after[relpath] else "before")
    return seen


def _snapshot(site: Path) -> dict[str, bytes]:
    return {rel: (site / rel).read_bytes() for rel in pristine()}


@pytest.mark.parametrize("first, second", [(set(), {"big.x", "big.y"}), ({"big.x", "big.y"}, {"big.x"})],
                         ids=["first-apply", "re-plan"])
def test_sigkill_anywhere_in_apply_is_finished_by_the_next_run(tmp_path, first, second):
    def fresh(name: str) -> Path:
        site = tmp_path / name
        make_dist(site, "big", "1.0", pristine())
        if first:
            apply(site, first)
        return site

    counted = _child(fresh("count"), second, 0)
    assert counted.returncode == 0, counted.stderr
    total = int(counted.stdout.split()[-1])
    kill_points = sorted({max(1, round(total * j / 10)) for j in range(1, 11)})
    mixed = 0
    for k in kill_points:
        site = fresh(f"k{k}")
        proc = _child(site, second, k)
        assert proc.returncode == -signal.SIGKILL, (k, proc.returncode, proc.stderr)
        seen = _states(site, expected(first), expected(second))
        mixed += seen == {"before", "after"}
        apply(site, second)  # the next run finishes (or redoes) the interrupted one
        assert _snapshot(site) == expected(second), f"kill at write {k} of {total}"
        manifest = json.loads((site / ".specdec-compat" / "big-1.0" / "manifest.json").read_text())
        assert manifest["patches"] == sorted(second) and not manifest.get("pending")
        assert not list(site.rglob("*.tmp"))
        Patcher(open_target("big", site)).revert()
        assert _snapshot(site) == pristine()
    assert mixed >= 2, f"no kill of {kill_points} (of {total} writes) landed between two package files"


def test_sigkill_during_a_re_plan_then_revert_restores_pristine(tmp_path):
    site = tmp_path / "site"
    make_dist(site, "big", "1.0", pristine())
    apply(site, {"big.x", "big.y"})
    counted_site = tmp_path / "count"
    make_dist(counted_site, "big", "1.0", pristine())
    apply(counted_site, {"big.x", "big.y"})
    total = int(_child(counted_site, {"big.x"}, 0).stdout.split()[-1])
    proc = _child(site, {"big.x"}, total - 2)  # the last package file is not written yet
    assert proc.returncode == -signal.SIGKILL
    assert _states(site, expected({"big.x", "big.y"}), expected({"big.x"})) == {"before", "after"}
    Patcher(open_target("big", site)).revert()
    assert _snapshot(site) == pristine()
    assert not (site / ".specdec-compat" / "big-1.0").exists()


def interrupted_re_plan(tmp_path) -> Path:
    """A site where apply {x, y} was followed by apply {x}, killed half way through its y files."""
    site = tmp_path / "site"
    make_dist(site, "big", "1.0", pristine())
    apply(site, {"big.x", "big.y"})
    proc = _child(site, {"big.x"}, N + 1 + N // 2)  # N staged copies, the record, then half the y files
    assert proc.returncode == -signal.SIGKILL
    return site


def test_read_only_modes_report_an_interrupted_run_and_change_nothing(tmp_path):
    site = interrupted_re_plan(tmp_path)
    before = _snapshot(site)
    assert _states(site, expected({"big.x", "big.y"}), expected({"big.x"})) == {"before", "after"}
    patcher = Patcher(open_target("big", site))
    verification = patcher.verify(decisions({"big.x"}))
    assert any("interrupted apply" in p for p in verification.problems), verification.problems
    assert "interrupted apply" in (patcher.plan(decisions({"big.x"})).interrupted or "")
    assert _snapshot(site) == before
