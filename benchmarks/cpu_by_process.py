"""Where a command's CPU goes, process by process: which interpreters and engines a contract cell pays for.

    python3 benchmarks/cpu_by_process.py -- python3 benchmarks/cell_time.py pinned:0.4.0.1 --runs 1
    python3 benchmarks/cpu_by_process.py --interval 0.1 --top 25 -- COMMAND ...

Why: on 2 cores a cell's wall time cannot go below its CPU seconds / 2 (issue 32's P2 goal, 12 x ``import vllm``,
is a CPU budget), and cutting CPU means starting fewer interpreters and engines, so the question is which
processes burn it.  The command runs as a child; every descendant is sampled from ``/proc`` every ``--interval``
seconds (``utime + stime`` of ``/proc/PID/stat``, the process's own CPU, its children not included) and grouped
by role, read from its command line and name.  A process that lives less than an interval may be missed, and the
last interval of each is lost: the exact total (this process is the tree's subreaper and reaps every process of
it, orphans included, so ``RUSAGE_CHILDREN`` holds them all) is printed beside the sampled sum, so the coverage
of the table is known.  Prints, never asserts; exits with the
command's code.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import resource
import re
import subprocess
import sys
import time
from dataclasses import dataclass

TICK = os.sysconf("SC_CLK_TCK")
PR_SET_CHILD_SUBREAPER = 36
#: (role, pattern on "comm: cmdline"), first match wins
ROLES = (
    ("shell", re.compile(r"^(ba|da)?sh: ")),
    ("vLLM worker (forked or spawned)", re.compile(r"VllmWorker|VLLM::Worker|Worker_TP|multiprocessing.spawn|"
                                                   r"multiprocessing\.forkserver")),
    ("vLLM engine core", re.compile(r"EngineCore|VLLM::EngineCore")),
    ("compat apply (a tree written)", re.compile(r"-m compat\.apply|compat apply")),
    ("compat confirm", re.compile(r"-m compat\.confirm|compat confirm")),
    ("compat plan / verify", re.compile(r"-m compat(\.plan)?\b|compat (plan|verify)")),
    ("contract harness", re.compile(r"tests\.contract\.harness")),
    ("pytest", re.compile(r"-m pytest|pytest")),
    ("python -c (a probe or import)", re.compile(r"python[\d.]* -c ")),
    ("python script", re.compile(r"python[\d.]* [^-]\S*\.py")),
    ("pip / uv", re.compile(r"\b(pip|uv)\b")),
)


@dataclass
class Seen:
    pid: int
    ppid: int
    name: str
    cmdline: str
    first: float
    last: float
    cpu: float  # seconds, own utime + stime at the last sample

    @property
    def role(self) -> str:
        text = f"{self.name}: {self.cmdline}"
        return next((role for role, pattern in ROLES if pattern.search(text)), f"other ({self.name})")


def _stat(pid: int) -> tuple[int, str, float, int] | None:
    """(ppid, name, own CPU seconds, start time in ticks): a pid and its start time name one process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            raw = f.read()
    except OSError:
        return None
    name = raw[raw.index("(") + 1:raw.rindex(")")]
    fields = raw[raw.rindex(")") + 2:].split()  # from field 3 (state) on
    return int(fields[1]), name, (int(fields[11]) + int(fields[12])) / TICK, int(fields[19])


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _descendants(root: int, parents: dict[int, int]) -> set[int]:
    tree, grew = {root}, True
    while grew:
        more = {pid for pid, ppid in parents.items() if ppid in tree and pid not in tree}
        tree |= more
        grew = bool(more)
    return tree


def sample(root: int, seen: dict[tuple[int, int], Seen], started: float) -> None:
    """Every process under ``root`` now (``root`` itself included); an orphan reparented to this process (the
    subreaper) stays counted, being still under it."""
    now = time.monotonic() - started
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))) is not None:
            stats[int(entry)] = stat
    for pid in _descendants(root, {pid: s[0] for pid, s in stats.items()}) - {root}:
        ppid, name, cpu, start = stats[pid]
        record = seen.get((pid, start))
        if record is None:
            record = seen[(pid, start)] = Seen(pid, ppid, name, _cmdline(pid), now, now, cpu)
        record.last, record.cpu = now, cpu
        if name != record.name:  # after exec or setproctitle: the same process under its new name
            record.name, record.cmdline = name, _cmdline(pid) or record.cmdline


def _children() -> list[int]:
    """This process's live children (the command, or orphans still running after it ended)."""
    me = os.getpid()
    return [int(e) for e in os.listdir("/proc") if e.isdigit() and (s := _stat(int(e))) and s[0] == me]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=0.2, help="seconds between samples (default 0.2)")
    parser.add_argument("--top", type=int, default=20, help="the costliest processes listed (default 20)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command or args.interval <= 0:
        parser.error("give a command after --, and a positive --interval")
    # a subreaper: orphans of the tree (vLLM's workers outliving their parent) are reparented here, and reaped
    # here, so RUSAGE_CHILDREN counts every process of the tree
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    started = time.monotonic()
    proc = subprocess.Popen(command)
    seen: dict[tuple[int, int], Seen] = {}
    code = None
    while True:
        sample(os.getpid(), seen, started)
        while True:  # reap whatever ended: the command, or an orphan
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                pid = 0
            if not pid:
                break
            if pid == proc.pid:
                code = os.waitstatus_to_exitcode(status)
        if code is not None and not _children():
            break
        time.sleep(args.interval)
    wall = time.monotonic() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    exact = usage.ru_utime + usage.ru_stime
    sampled = sum(s.cpu for s in seen.values())
    roles: dict[str, list[Seen]] = {}
    for item in seen.values():
        roles.setdefault(item.role, []).append(item)
    print(f"\n# {' '.join(command)}: exit {code}, wall {wall:.1f} s, CPU {exact:.1f} s exact (every process of the "
          f"tree, reaped here), {sampled:.1f} s sampled ({100 * sampled / exact if exact else 0:.0f} %) in {len(seen)} "
          f"processes every {args.interval} s; {os.cpu_count()} cores, so the wall cannot go below "
          f"{exact / (os.cpu_count() or 1):.0f} s")
    print(f"{'role':40} {'procs':>5} {'CPU s':>8} {'share':>6}")
    for role, items in sorted(roles.items(), key=lambda kv: -sum(s.cpu for s in kv[1])):
        cpu = sum(s.cpu for s in items)
        print(f"{role:40} {len(items):5} {cpu:8.1f} {100 * cpu / sampled if sampled else 0:5.0f}%")
    print(f"\n{'CPU s':>7} {'from s':>7} {'to s':>7}  process")
    for item in sorted(seen.values(), key=lambda s: -s.cpu)[:args.top]:
        print(f"{item.cpu:7.1f} {item.first:7.1f} {item.last:7.1f}  [{item.role}] {item.name}: {item.cmdline[:150]}")
    return code


if __name__ == "__main__":
    sys.exit(main())
