"""Where a command's CPU goes, process by process: which interpreters and engines a contract cell pays for.

    python3 benchmarks/cpu_by_process.py -- python3 benchmarks/cell_time.py pinned:0.4.0.1 --runs 1
    python3 benchmarks/cpu_by_process.py --interval 0.1 --top 25 -- COMMAND ...
    python3 benchmarks/cpu_by_process.py --stacks -- COMMAND ...   # also what each process did (py-spy)

Why: on 2 cores a cell's wall time cannot go below its CPU seconds / 2 (the P2 goal, 12 x ``import vllm``,
is a CPU budget), and cutting CPU means starting fewer interpreters and engines, so the question is which
processes burn it.  The command runs as a child; every descendant is sampled from ``/proc`` every ``--interval``
seconds (``utime + stime`` of ``/proc/PID/stat``, the process's own CPU, its children not included) and grouped
by role, read from its command line and name.  A process that lives less than an interval may be missed, and the
last interval of each is lost: the exact total (this process is the tree's subreaper and reaps every process of
it, orphans included, so ``RUSAGE_CHILDREN`` holds them all) is printed beside the sampled sum, so the coverage
of the table is known.  Prints, never asserts; exits with the
command's code.

``--stacks`` also records the command under py-spy (``py-spy record --subprocesses``, from ``$PATH`` or
``$SPECDEC_COMPAT_PYSPY``, else installed once into the kit cache from PyPI) and splits each process's CPU by
what its sampled stacks were doing: importing, loading the model, profiling memory and allocating the KV cache,
spinning on vLLM's message queue, forward passes (``benchmarks/stack_activity.py`` says how and why).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import resource
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import stack_activity  # noqa: E402

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


PYSPY = "py-spy==0.4.3"


def py_spy() -> str:
    """py-spy's executable: ``$SPECDEC_COMPAT_PYSPY``, on ``$PATH``, or installed once into the kit cache."""
    found = os.environ.get("SPECDEC_COMPAT_PYSPY") or shutil.which("py-spy")
    if found:
        return found
    from compat.layout import cache_root

    target = cache_root() / "tools-py-spy"
    binary = target / "bin" / "py-spy"
    if not binary.exists():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(target), PYSPY], check=True)
    return str(binary)


def print_activities(seen: dict, raw: Path, top: int = 20) -> None:
    """CPU by activity, over all and per role: each process's exact CPU shared out by its sampled stacks."""
    imports: dict = {}
    with open(raw) as lines:
        samples = stack_activity.samples_by_pid(lines, imports)
    cpu_by_pid: Counter = Counter()
    role_of = {}
    for item in seen.values():
        if item.name == "py-spy":
            continue
        cpu_by_pid[item.pid] += item.cpu  # a pid reused within the run: both processes share one split
        role_of[item.pid] = item.role
    overall, by_role, packages, unsampled = Counter(), {}, Counter(), 0.0
    for pid, cpu in cpu_by_pid.items():
        parts = stack_activity.split(cpu, samples.get(pid))
        if not parts:
            unsampled += cpu
            continue
        overall.update(parts)
        by_role.setdefault(role_of[pid], Counter()).update(parts)
        packages.update(stack_activity.split(cpu, samples.get(pid), imports.get(pid, Counter())))
    total = sum(overall.values()) + unsampled
    print(f"\n## CPU by activity (each process's CPU shared out by its py-spy samples; {unsampled:.1f} s in "
          f"processes py-spy never sampled)")
    print(f"{'activity':40} {'CPU s':>8} {'share':>6}")
    for name, cpu in overall.most_common():
        print(f"{name:40} {cpu:8.1f} {100 * cpu / total if total else 0:5.0f}%")
    print(f"\n{'role':40} {'CPU s':>8}  by activity")
    for role, parts in sorted(by_role.items(), key=lambda kv: -sum(kv[1].values())):
        spread = ", ".join(f"{name} {cpu:.1f}" for name, cpu in parts.most_common() if cpu >= 0.05)
        print(f"{role:40} {sum(parts.values()):8.1f}  {spread}")
    print(f"\n{'import CPU s':>12} {'of CPU s':>8}  process (the interpreters that pay for imports)")
    importers = []
    for item in seen.values():
        parts = stack_activity.split(cpu_by_pid[item.pid], samples.get(item.pid)) if item.name != "py-spy" else {}
        if parts.get("import", 0) >= 0.5:
            importers.append((parts["import"], item))
    for cpu, item in sorted(importers, key=lambda x: -x[0])[:top]:
        print(f"{cpu:12.1f} {item.cpu:8.1f}  [{item.role}] {item.name}: {item.cmdline[:120]}")
    print(f"\n{'import: the module bodies it ran, by package':44} {'CPU s':>8}")
    for name, cpu in packages.most_common(top):
        print(f"{name:44} {cpu:8.1f}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=0.2, help="seconds between samples (default 0.2)")
    parser.add_argument("--top", type=int, default=20, help="the costliest processes listed (default 20)")
    parser.add_argument("--stacks", action="store_true",
                        help="also split each process's CPU by what py-spy saw it doing (imports, engine start, spin)")
    parser.add_argument("--stacks-rate", type=int, default=20, help="py-spy's samples per second (default 20)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command or args.interval <= 0:
        parser.error("give a command after --, and a positive --interval")
    # a subreaper: orphans of the tree (vLLM's workers outliving their parent) are reparented here, and reaped
    # here, so RUSAGE_CHILDREN counts every process of the tree
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    raw = None
    if args.stacks:
        import tempfile

        raw = Path(tempfile.mkdtemp(prefix="cpu-stacks-")) / "stacks.raw"
        command = [py_spy(), "record", "--subprocesses", "--format", "raw", "--rate", str(args.stacks_rate),
                   "--output", str(raw), "--", *command]
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
    if raw is not None:
        if raw.exists():
            print_activities(seen, raw, args.top)
        else:
            print(f"\n## CPU by activity: py-spy wrote no {raw}")
    return code


if __name__ == "__main__":
    sys.exit(main())
