"""What the before/after benchmarks share: another commit's tree beside this checkout, ABBA order, timed runs.

Why: a ratio is only worth printing when both trees ran in the same run on the same machine under the same
load (the project's rule: measured side by side, never a figure from another day).
"""

from __future__ import annotations

import resource
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(cmd: list[str], env: dict | None = None, cwd: Path = ROOT) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run ``cmd``; its output, wall seconds and CPU seconds (user + system of it and its children)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return proc, wall, (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)


def worktree(rev: str, into: Path, who: str = "benchmark") -> Path:
    """``rev`` checked out (detached) under ``into``; a clear error when git cannot."""
    tree = into / f"before-{rev}"
    proc = subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(tree), rev],
                          capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"{who}: cannot check out {rev!r}: {proc.stderr.strip()}")
    return tree


def remove_worktree(tree: Path) -> None:
    """The worktree, and the temporary folder that held it once it is empty."""
    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)])
    try:
        tree.parent.rmdir()
    except OSError:
        pass


def order(index: int, trees: list[tuple[str, Path]]) -> list[tuple[str, Path]]:
    """ABBA: even runs time the trees in order, odd runs in reverse, so a drifting load weighs on both."""
    return trees if index % 2 == 0 else trees[::-1]
