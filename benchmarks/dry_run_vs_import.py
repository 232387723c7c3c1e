"""Wall time of `python -m compat.apply --dry-run` vs `python -c "import vllm"`, side by side.

    python3 fixtures/lanes.py run pinned -- python benchmarks/dry_run_vs_import.py [ROUNDS]

Alternates the two commands ROUNDS times (default 5) in fresh interpreters of
the same environment and prints each median and their ratio.  Prints, never
asserts: its output is saved under docs/benchmarks/, not held by tests.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

COMMANDS = {
    "compat.apply --dry-run": [sys.executable, "-m", "compat.apply", "--dry-run"],
    "import vllm": [sys.executable, "-c", "import vllm"],
}


def main(rounds: int) -> int:
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(rounds):
        for name, cmd in COMMANDS.items():
            started = time.perf_counter()
            proc = subprocess.run(cmd, cwd="/", capture_output=True)
            times[name].append(time.perf_counter() - started)
            if proc.returncode not in (0, 1):
                print(f"{name} exited {proc.returncode}: {proc.stderr.decode()[-500:]}")
                return 1
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, median in medians.items():
        print(f"{name:24} median {median:6.3f} s   runs {', '.join(f'{t:.3f}' for t in times[name])}")
    ratio = medians["compat.apply --dry-run"] / medians["import vllm"]
    print(f"ratio dry-run / import vllm = {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 5))
