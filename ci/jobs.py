"""Run ``.ci/run``'s one-core jobs N at a time: each output line prefixed with its job's name, then each job's exit,
minutes and CPU minutes.

Why: a serve lane keeps about one core busy (its server, engine and client take turns; the load stays near 1.0
on two cores), so two of them at once use the machine that one leaves half idle.  The old path's harness is not
such a job: it runs its engines side by side on both cores already.

    python3 -m ci.jobs --jobs 2 "serve=python3 fixtures/lanes.py test --no-unit serve" "unit=python3 fixtures/lanes.py test --unit-only"

CPU is what the kernel accounts to the job's process and the descendants it waited for (``os.wait4``): on two
cores the sum over jobs is the floor of the phase's wall time, and it says which job to make cheaper (issue 32).
Jobs start in the order given (longest first balances best).  ``NAME=COMMAND`` is split as a shell would
(``shlex``), and nothing else of a shell is used.  Exit 0 when every job exited 0, else 1; 2 for a bad argument.
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


def parse_job(text: str) -> Job:
    name, sep, command = text.partition("=")
    if not sep or not name.strip() or not command.strip():
        raise argparse.ArgumentTypeError(f"a job is NAME=COMMAND, not {text!r}")
    return Job(name.strip(), shlex.split(command))


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


def run_all(jobs: list[Job], width: int) -> int:
    started, lock, pending = time.monotonic(), threading.Lock(), list(jobs)
    take = threading.Lock()

    def worker():
        while True:
            with take:
                if not pending:
                    return
                job = pending.pop(0)
            run_job(job, started, lock)
            with lock:
                print(f"== job {job.name}: exit {job.code} in {_minutes(job.seconds)}, {_minutes(job.cpu)} CPU "
                      f"({_cores(job)} cores; started at {_minutes(job.started_at)})", flush=True)

    threads = [threading.Thread(target=worker) for _ in range(min(width, len(jobs)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    cpu = sum(j.cpu for j in jobs)
    print(f"== jobs, {width} at a time, {_minutes(time.monotonic() - started)} in all, {_minutes(cpu)} CPU (on "
          f"{os.cpu_count()} cores at least {_minutes(cpu / (os.cpu_count() or 1))}): " +
          "; ".join(f"{j.name} exit {j.code} {_minutes(j.seconds)} ({_minutes(j.cpu)} CPU)" for j in jobs), flush=True)
    return 0 if all(j.code == 0 for j in jobs) else 1


def _cores(job: Job) -> str:
    return f"{job.cpu / job.seconds:.2f}" if job.seconds else "0"


def _minutes(seconds: float) -> str:
    return f"{int(seconds) // 60} min {int(seconds) % 60} s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ci.jobs", description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="jobs at once (default 2)")
    parser.add_argument("job", nargs="+", type=parse_job, metavar="NAME=COMMAND")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    names = [j.name for j in args.job]
    if len(set(names)) != len(names):
        parser.error(f"job names repeat: {names}")
    return run_all(args.job, args.jobs)


if __name__ == "__main__":
    sys.exit(main())
