"""Run ``.ci/run``'s jobs N at a time in one pool: each output line prefixed with its job's name, then each job's
exit, minutes and CPU minutes.

Why one pool: .ci/run's phases each ended on a ragged tail (one job left, one core idle) and its old-path
phases ran alone on a harness that keeps about 1.2 cores busy; a pool that starts the next ready job the moment a
slot frees keeps both cores busy to the end.  A serve lane keeps about one core busy (its server, engine and
client take turns), so two jobs at once fill two cores; a third only slows the other two (measured: a tiny
Kimi-K2.5 confirm took 140 s beside one other job, 240 s beside two).

    python3 -m ci.jobs --jobs 2 --after user=unit "unit=python3 fixtures/lanes.py test --unit-only" "user=..."

* Jobs start in the order given (longest first balances best), each as soon as a slot is free and every job it
  comes ``--after`` has ended (whatever its exit: an order, e.g. two jobs that would share a venv or a port range).
* ``--optional JOB=MIN`` with ``--budget MIN``: JOB starts only if it should end within the budget (the minutes
  the pool has, MIN its measured upper end); otherwise it is NOT RUN, said with the minute reached, and does not
  fail the pool (it is never counted as a pass either).
* CPU is what the kernel accounts to the job's process and the descendants it waited for (``os.wait4``); a
  server's engine whose parent died first is not among them, so the pool also prints the machine's busy cores
  over its run (``/proc/stat``: every process), the number that says how well it packed.

``NAME=COMMAND`` is split as a shell would (``shlex``), and nothing else of a shell is used.  Exit 0 when every job
that ran exited 0, else 1; 2 for a bad argument.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field


@dataclass
class Job:
    name: str
    argv: list[str]
    code: int | None = None
    seconds: float = 0.0
    cpu: float = 0.0  # user + system seconds of the job and the descendants it waited for
    started_at: float = field(default=0.0)
    not_run: str = ""  # why an optional job did not start (its code stays None)


def parse_job(text: str) -> Job:
    name, sep, command = text.partition("=")
    if not sep or not name.strip() or not command.strip():
        raise argparse.ArgumentTypeError(f"a job is NAME=COMMAND, not {text!r}")
    return Job(name.strip(), shlex.split(command))


def parse_pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip() or not value.strip():
        raise argparse.ArgumentTypeError(f"expected JOB=VALUE, not {text!r}")
    return name.strip(), value.strip()


def run_job(job: Job, started: float, lock: threading.Lock) -> None:
    job.started_at = time.monotonic() - started
    begun = time.monotonic()
    try:
        proc = subprocess.Popen(job.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace", bufsize=1)
    except OSError as exc:
        with lock:
            print(f"[{job.name}] cannot start {job.argv[0]!r}: {exc}", flush=True)
        job.code, job.seconds = 127, time.monotonic() - begun
        return
    for line in proc.stdout:
        with lock:
            sys.stdout.write(f"[{job.name}] {line}")
            sys.stdout.flush()
    job.code, job.cpu = _reap(proc)
    job.seconds = time.monotonic() - begun


def _reap(proc: subprocess.Popen) -> tuple[int, float]:
    """The exit code and CPU seconds of ``proc`` (wait4 reports both; Popen.wait would drop the CPU)."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_utime + usage.ru_stime


def machine_ticks() -> tuple[int, int] | None:
    """(busy, total) jiffies of every CPU since boot, from /proc/stat; None where it cannot be read."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(v) for v in stat.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def busy_cores(before: tuple[int, int] | None, after: tuple[int, int] | None) -> str:
    if not before or not after or after[1] <= before[1]:
        return "not read"
    cores = os.cpu_count() or 1
    return f"{cores * (after[0] - before[0]) / (after[1] - before[1]):.2f} of {cores}"


def order_problem(jobs: list[Job], after: dict[str, list[str]]) -> str | None:
    """Why ``after`` cannot be followed (an unknown job, or a cycle), else None."""
    names = {j.name for j in jobs}
    for name, deps in after.items():
        unknown = [n for n in (name, *deps) if n not in names]
        if unknown:
            return f"--after names no such job: {', '.join(unknown)}"
    state: dict[str, int] = {}

    def cyclic(name: str) -> bool:
        if state.get(name) == 1:
            return True
        if state.get(name) == 2:
            return False
        state[name] = 1
        if any(cyclic(dep) for dep in after.get(name, ())):
            return True
        state[name] = 2
        return False

    looped = [n for n in names if cyclic(n)]
    return f"--after makes a cycle through {sorted(looped)[0]}" if looped else None


def run_all(jobs: list[Job], width: int, after: dict[str, list[str]] | None = None,
            optional: dict[str, float] | None = None, budget: float | None = None) -> int:
    after, optional = after or {}, optional or {}
    started, lock, ticks = time.monotonic(), threading.Lock(), machine_ticks()
    pending, running, ended = list(jobs), set(), set()
    changed = threading.Condition()

    def finish(job: Job) -> None:
        run_job(job, started, lock)
        with lock:
            print(f"== job {job.name}: exit {job.code} in {_minutes(job.seconds)}, {_minutes(job.cpu)} CPU "
                  f"({_cores(job)} cores; started at {_minutes(job.started_at)})", flush=True)
        with changed:
            running.discard(job.name)
            ended.add(job.name)
            changed.notify_all()

    threads = []
    with changed:
        while pending:
            ready = next((j for j in pending if all(d in ended for d in after.get(j.name, ()))), None)
            if ready is None or len(running) >= width:
                changed.wait()
                continue
            pending.remove(ready)
            minute = (time.monotonic() - started) / 60
            if ready.name in optional and budget is not None and minute + optional[ready.name] > budget:
                ready.not_run = (f"at minute {minute:.0f} of the pool's {budget:g}, it would not end in time "
                                 f"(up to {optional[ready.name]:g} min)")
                with lock:
                    print(f"== job {ready.name}: NOT RUN, {ready.not_run}", flush=True)
                ended.add(ready.name)
                continue
            running.add(ready.name)
            thread = threading.Thread(target=finish, args=(ready,))
            threads.append(thread)
            thread.start()
    for thread in threads:
        thread.join()
    ran = [j for j in jobs if not j.not_run]
    cpu = sum(j.cpu for j in ran)
    print(f"== jobs, {width} at a time, {_minutes(time.monotonic() - started)} in all, {_minutes(cpu)} CPU (on "
          f"{os.cpu_count()} cores at least {_minutes(cpu / (os.cpu_count() or 1))}; the machine's busy cores over "
          f"the pool: {busy_cores(ticks, machine_ticks())}): " +
          "; ".join(f"{j.name} NOT RUN" if j.not_run else
                    f"{j.name} exit {j.code} {_minutes(j.seconds)} ({_minutes(j.cpu)} CPU)" for j in jobs), flush=True)
    return 0 if all(j.code == 0 for j in ran) else 1


def _minutes(seconds: float) -> str:
    return f"{int(seconds) // 60} min {int(seconds) % 60} s"


def _cores(job: Job) -> str:
    return f"{job.cpu / job.seconds:.2f}" if job.seconds else "0"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ci.jobs", description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="jobs at once (default 2)")
    parser.add_argument("--after", action="append", default=[], type=parse_pair, metavar="JOB=DEP[,DEP]",
                        help="JOB starts only after each DEP ended, whatever its exit (repeatable)")
    parser.add_argument("--optional", action="append", default=[], type=parse_pair, metavar="JOB=MIN",
                        help="with --budget: JOB starts only if it should end within the budget (MIN: its "
                             "measured upper end), else NOT RUN without failing the pool (repeatable)")
    parser.add_argument("--budget", type=float, help="minutes the pool has, for --optional jobs")
    parser.add_argument("job", nargs="+", type=parse_job, metavar="NAME=COMMAND")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    names = [j.name for j in args.job]
    if len(set(names)) != len(names):
        parser.error(f"job names repeat: {names}")
    after: dict[str, list[str]] = {}
    for name, deps in args.after:
        after.setdefault(name, []).extend(d.strip() for d in deps.split(",") if d.strip())
    problem = order_problem(args.job, after)
    if problem:
        parser.error(problem)
    optional = {}
    for name, minutes in args.optional:
        try:
            optional[name] = float(minutes)
        except ValueError:
            parser.error(f"--optional {name}={minutes}: minutes must be a number")
        if name not in names:
            parser.error(f"--optional names no such job: {name}")
    if optional and args.budget is None:
        parser.error("--optional needs --budget (the minutes the pool has)")
    return run_all(args.job, args.jobs, after, optional, args.budget)


if __name__ == "__main__":
    sys.exit(main())
