"""Wall and CPU time of building lanes: this checkout's lanes.py (uv, pip's sources) beside another commit's (pip),
in one run, each into its own empty cache, so every figure is a first build as on a fresh CI machine.

    python3 benchmarks/lane_build.py --before 5a8f3aa                    # serve-low, pinned, serve-07
    python3 benchmarks/lane_build.py serve-low serve --before 5a8f3aa

Per tree, the lanes are built one after another into that tree's empty cache: for this checkout the first lane of
a torch group fills the uv cache (downloads and unpacks), the next ones hardlink from it; for the pip tree every
lane downloads and unpacks again (pip keeps no cache here).  Trees alternate per lane (ABBA).  The yardstick is
``python -c "import vllm"`` in the first lane, timed in the same run.  Then ``pip freeze`` of each lane in both
trees is compared: uv must install what pip installed.  Benchmarks print, never assert; exit 1 when a build
failed or the two trees' lanes differ.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.side_by_side import order, remove_worktree, timed, worktree  # noqa: E402

#: a torch group's first lane (cold uv cache), a second lane of that group (warm), another group
DEFAULT_LANES = ("serve-low", "serve-07", "pinned")


def build(tree: Path, cache: Path, lane: str) -> dict:
    env = {**__import__("os").environ, "SPECDEC_COMPAT_CACHE": str(cache)}
    proc, wall, cpu = timed([sys.executable, str(tree / "fixtures" / "lanes.py"), "build", lane], env=env, cwd=tree)
    python = cache / "venvs" / lane / "bin" / "python"
    freeze = subprocess.run([str(python), "-m", "pip", "freeze", "--exclude", "specdec-compat"], capture_output=True,
                            text=True).stdout if proc.returncode == 0 else ""
    return {"wall": wall, "cpu": cpu, "exit": proc.returncode, "freeze": sorted(freeze.split()),
            "tail": proc.stdout.splitlines()[-3:]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lanes", nargs="*", default=list(DEFAULT_LANES))
    parser.add_argument("--before", required=True, help="the commit whose lanes.py is timed beside this checkout's")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="lane-build-"))
    before = worktree(args.before, scratch, "lane_build")
    trees = [("after", ROOT), ("before", before)]
    caches = {name: scratch / f"cache-{name}" for name, _ in trees}
    results, failed = [], False
    try:
        for index, lane in enumerate(args.lanes):
            for name, tree in order(index, trees):
                result = build(tree, caches[name], lane)
                results.append({"lane": lane, "tree": name, **result})
                print(f"{lane:12} {name:>6}: wall {result['wall']:6.1f} s, cpu {result['cpu']:6.1f} s, "
                      f"exit {result['exit']}", flush=True)
                failed |= result["exit"] != 0
        first = scratch / "cache-after" / "venvs" / args.lanes[0] / "bin" / "python"
        yardstick, import_wall, import_cpu = timed([str(first), "-c", "import vllm"], cwd=Path("/"))
        print(f"\nyardstick: import vllm in {args.lanes[0]}: {import_wall:.1f} s wall, {import_cpu:.1f} s cpu "
              f"(exit {yardstick.returncode})")
        print(f"\n{'lane':12} {'pip wall':>9} {'uv wall':>8} {'pip/uv':>7} {'uv / import vllm':>17} {'same packages':>14}")
        total = {"before": 0.0, "after": 0.0}
        for lane in args.lanes:
            pip_run = next(r for r in results if r["lane"] == lane and r["tree"] == "before")
            uv_run = next(r for r in results if r["lane"] == lane and r["tree"] == "after")
            same = pip_run["freeze"] == uv_run["freeze"] and bool(uv_run["freeze"])
            failed |= not same
            total["before"] += pip_run["wall"]
            total["after"] += uv_run["wall"]
            print(f"{lane:12} {pip_run['wall']:9.1f} {uv_run['wall']:8.1f} {pip_run['wall'] / uv_run['wall']:7.2f} "
                  f"{uv_run['wall'] / import_wall:17.1f} {('yes' if same else 'NO'):>14}")
            if not same:
                print(f"  only with pip: {sorted(set(pip_run['freeze']) - set(uv_run['freeze']))[:8]}\n"
                      f"  only with uv:  {sorted(set(uv_run['freeze']) - set(pip_run['freeze']))[:8]}")
        print(f"all {len(args.lanes)} lanes: pip {total['before']:.0f} s, uv {total['after']:.0f} s, "
              f"pip/uv {total['before'] / total['after']:.2f} (before = {args.before}, after = this checkout)")
    finally:
        remove_worktree(before)
        shutil.rmtree(scratch, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
