"""What each claim of a contract cell costs: the cell's harness with every part, then with one part left out.

    python3 benchmarks/cell_parts.py                          # pinned:0.4.0.1, one round
    python3 benchmarks/cell_parts.py seed:0.3.0 --rounds 2    # two rounds, the order turned each round
    python3 benchmarks/cell_parts.py --drop confirm --drop bf16

Why: goal P2 (the pinned cell at 12x ``import vllm``) is out of reach unless a claim leaves the cell, and
which one is a decision that needs each claim's price.  A cell's harness (tests/contract/harness.py, ``--mode
cell``) runs only the parts its tests ask for; this benchmark asks for all of them (as the whole suite does) and
then for all but one, in one run, on the same lane, and prints what leaving each out saves in wall and CPU
seconds, beside ``import vllm`` timed in the same lane.  The parts: ``confirm`` (compat confirm's command line,
its vllm-extract reference and its short runs), ``bf16`` (the run the tolerance must reject), ``binding`` (p36's
spawned proof), ``proofs`` (every leave-one-out proof, p37's exit run and, with it, ``binding``), ``reverted``
(apply then --revert, run again).  ``pristine`` and ``patched`` are the cell's spine and always run.

Only the harness is timed, not pytest around it (its collection and reading of the report cost the same in every
variant).  Prints, never asserts; exits 1 when a harness run failed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.side_by_side import timed  # noqa: E402
from fixtures import lanes  # noqa: E402

ALL = ("pristine", "patched", "reverted", "bf16", "proofs", "confirm", "binding")
OPTIONAL = ("confirm", "bf16", "binding", "proofs", "reverted")
#: leaving a part out leaves out what needs it: the binding proof is one of the proofs
NEEDS = {"proofs": ("binding",)}


def parts_without(drop: str | None) -> list[str]:
    gone = {drop, *NEEDS.get(drop, ())} if drop else set()
    return [part for part in ALL if part not in gone]


def _lane_python(item, code: str) -> str:
    proc, _, _ = timed([str(item.bin / "python"), "-c", code], _env(item))
    if proc.returncode:
        raise SystemExit(f"cell_parts: the lane's python failed: {proc.stdout[-2000:]}")
    return proc.stdout.strip().splitlines()[-1]


def _env(item) -> dict:
    """The lane's environment with what tests/contract/conftest.py sets for its harness."""
    env = lanes.lane_env(item)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(ROOT), env.get("PYTHONPATH"))))
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS", "1")
    return env


def run_harness(item, version, steps, model: str, together: list[str], parts: list[str], scratch: Path) -> dict:
    lanes.use_speculators(item, version, steps)  # every run starts pristine, as a cell does
    out = Path(tempfile.mkdtemp(prefix="parts-", dir=scratch)) / "r.json"
    cmd = [str(item.bin / "python"), "-m", "tests.contract.harness", "--model", model, "--out", str(out),
           "--mode", "cell", "--parts", ",".join(parts), *[a for pid in together for a in ("--together", pid)]]
    load = os.getloadavg()[0]
    proc, wall, cpu = timed(cmd, _env(item))
    ran = sorted(k for k in json.loads(out.read_text()) if k in ALL) if out.exists() else []
    return {"parts": parts, "wall": wall, "cpu": cpu, "exit": proc.returncode, "load": load, "ran": ran,
            "tail": proc.stdout[-1500:] if proc.returncode else ""}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cell", nargs="?", default="pinned:0.4.0.1", help="LANE[:SPECULATORS] (default pinned:0.4.0.1)")
    parser.add_argument("--rounds", type=int, default=1, help="times each variant runs (default 1)")
    parser.add_argument("--drop", action="append", choices=OPTIONAL, help=f"the parts to price (default: {' '.join(OPTIONAL)})")
    args = parser.parse_args(argv)
    name, _, version = args.cell.partition(":")
    if name not in lanes.LANES:
        parser.error(f"unknown lane {name!r}: one of {', '.join(lanes.LANES)}")
    item = lanes.build(lanes.LANES[name])
    version = version or item.speculators[0]
    steps = lanes.Steps(f"cell parts in lane {name}", item.log)
    found = lanes.patches_on_disk(item)
    lanes.install_kit(item, steps)
    model = _lane_python(item, "import transformers; from compat.layout import cache_root; from fixtures.tiny_model "
                               "import build_tiny_llama; print(build_tiny_llama(cache_root() / 'models' / "
                               "f'tiny-llama-tf{transformers.__version__}'))")
    together = _lane_python(item, "from tests.contract.test_patch_proofs import UNOBSERVABLE_ON_CPU; "
                                  "print(' '.join(UNOBSERVABLE_ON_CPU))").split()
    proc, yard_wall, yard_cpu = timed([str(item.bin / "python"), "-c", "import vllm"], lanes.lane_env(item))
    print(f"== import vllm in lane {name}: wall {yard_wall:.1f} s, cpu {yard_cpu:.1f} s, exit {proc.returncode}",
          flush=True)
    variants = [None, *(args.drop or OPTIONAL)]
    scratch = Path(tempfile.mkdtemp(prefix="cell-parts-"))
    results: dict = {v: [] for v in variants}
    try:
        for round_ in range(max(args.rounds, 1)):
            order = variants[round_ % len(variants):] + variants[:round_ % len(variants)]
            for drop in order:
                result = run_harness(item, version, steps, model, together, parts_without(drop), scratch)
                results[drop].append(result)
                label = "every part" if drop is None else f"without {drop}"
                print(f"== round {round_ + 1}, {label}: wall {result['wall']:.1f} s, cpu {result['cpu']:.1f} s, "
                      f"exit {result['exit']}, load before {result['load']:.2f}; report parts: "
                      f"{', '.join(result['ran'])}", flush=True)
                if result["exit"]:
                    print(result["tail"], flush=True)
    finally:
        lanes.restore_default(item, steps, found)
    full = results[None]
    base_wall = statistics.median(r["wall"] for r in full)
    base_cpu = statistics.median(r["cpu"] for r in full)
    print(f"\nlane {name}, speculators {version}; the harness with every part: {base_wall:.1f} s wall "
          f"({base_wall / yard_wall:.1f} x import vllm), {base_cpu:.1f} s cpu; median over {len(full)} run(s)")
    print(f"{'left out':12} {'wall s':>8} {'cpu s':>8} {'saves wall':>11} {'saves cpu':>10} {'x import vllm':>14}")
    for drop in variants[1:]:
        wall = statistics.median(r["wall"] for r in results[drop])
        cpu = statistics.median(r["cpu"] for r in results[drop])
        print(f"{drop:12} {wall:8.1f} {cpu:8.1f} {base_wall - wall:11.1f} {base_cpu - cpu:10.1f} "
              f"{wall / yard_wall:14.1f}")
    return 1 if any(r["exit"] for rs in results.values() for r in rs) else 0


if __name__ == "__main__":
    sys.exit(main())
