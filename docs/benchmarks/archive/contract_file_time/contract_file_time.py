"""CPU seconds of one contract test file in a lane: this checkout beside another commit, ABBA, one run.

    python3 benchmarks/contract_file_time.py tests/once/test_transformers524.py --lane pinned --before b4d4a2d

For the parts of a cell that need no engine and leave the lane as they found it (test_transformers524.py unpacks
wheels into a temporary folder): the lane is only read, nothing is installed into it and its speculators is not
swapped, so other people's runs in the shared lane are not disturbed (benchmarks/cell_time.py times whole cells
and installs each tree's kit).  Each tree runs its own copy of the file from its own directory (its ``compat``
first on sys.path).  ``python -c "import vllm"`` in the lane is the yardstick.  Prints, never asserts.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.side_by_side import order, remove_worktree, timed, worktree  # noqa: E402
from fixtures import lanes  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", help="a contract test file, relative to the checkout")
    parser.add_argument("--lane", default="pinned")
    parser.add_argument("--before", default="b4d4a2d")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each tree (default 2)")
    args = parser.parse_args(argv)
    python = str(lanes.VENVS / args.lane / "bin" / "python")
    tree = worktree(args.before, Path(tempfile.mkdtemp(prefix="file-time-")), "contract_file_time")
    trees = [("before", tree), ("after", ROOT)]
    cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "contract", args.file]
    runs: dict[str, list[tuple[float, float]]] = {"before": [], "after": []}
    try:
        _, wall, cpu = timed([python, "-c", "import vllm"], cwd=Path("/"))
        yardstick = (cpu, wall)
        print(f"import vllm in lane {args.lane}: cpu {cpu:.1f} s, wall {wall:.1f} s")
        for index in range(args.rounds):
            for name, where in order(index, trees):
                load = os.getloadavg()[0]
                proc, wall, cpu = timed(cmd, cwd=where)
                runs[name].append((cpu, wall))
                tail = [line for line in proc.stdout.splitlines() if line.strip()][-1:]
                print(f"{name:6} cpu {cpu:6.1f} s  wall {wall:6.1f} s  exit {proc.returncode}  load {load:.2f}  "
                      f"{' '.join(tail)}", flush=True)
    finally:
        remove_worktree(tree)
    medians = {n: (statistics.median(c for c, _ in r), statistics.median(w for _, w in r)) for n, r in runs.items()}
    for name, (cpu, wall) in medians.items():
        print(f"median {name:6}: {cpu:.1f} CPU-s ({cpu / yardstick[0]:.1f} x import vllm), {wall:.1f} s wall")
    print(f"after / before: cpu {medians['after'][0] / medians['before'][0]:.2f}, "
          f"wall {medians['after'][1] / medians['before'][1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
