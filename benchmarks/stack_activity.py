"""What each process of a command was doing, from py-spy's sampled stacks: importing, starting an engine,
spinning on vLLM's message queue, computing.

``benchmarks/cpu_by_process.py --stacks`` records the command under ``py-spy record --subprocesses --format raw``
and splits every process's exact CPU seconds (read from ``/proc``) by the share of its samples in each activity.
Why the split and not py-spy's sample counts themselves: py-spy counts a thread as active while it is runnable,
waiting for a core too, so on 2 busy cores its counts overstate CPU about twofold; the shares within one process
are what it measures well.

An activity is the first of ``ACTIVITIES`` whose frame pattern any frame of the stack matches, so a spin inside
``execute_model`` is a spin, and an import inside ``load_model`` is an import.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict

#: (activity, pattern on a frame "function (file:line)"), first match over the whole stack wins
ACTIVITIES = (
    ("spin on vLLM's message queue", re.compile(r"^sched_yield \(vllm/|^SpinCondition\.wait \(|^spinloop \(")),
    ("import", re.compile(r"^_find_and_load \(|^_load_unlocked \(|^exec_module \(|^import_module \(")),
    ("model load", re.compile(r"load_model \(vllm/|load_weights \(")),
    ("KV cache and memory profiling", re.compile(
        r"determine_available_memory \(|profile_run \(|initialize_kv_cache|allocate_kv_cache \(|"
        r"_cleanup_profiling_kv_cache \(|compile_or_warm_up_model \(|_dummy_run \(")),
    ("HF reference (transformers forward)", re.compile(r"\(transformers/models/")),
    ("vLLM forward and sampling", re.compile(r"^execute_model \(|\.execute_model \(|sample_tokens \(|"
                                             r"\(vllm/model_executor/models/")),
)
OTHER = "other"
PROCESS = re.compile(r'^process (\d+):')
MODULE = re.compile(r"^<module> \(([^:]+):")
#: packages whose imports are told apart by their first sub-package (torch/_inductor, vllm/entrypoints)
SPLIT_PACKAGES = ("torch", "vllm", "transformers")


def activity(frames: list[str]) -> str:
    for name, pattern in ACTIVITIES:
        if any(pattern.search(frame) for frame in frames):
            return name
    return OTHER


def package(frames: list[str]) -> str | None:
    """The package whose module body an import sample is in (its innermost ``<module>`` frame): what the time
    of the import goes to, however it was reached."""
    modules = [m.group(1) for f in frames if (m := MODULE.match(f))]
    if not modules:
        return None
    parts = modules[-1].split("/")
    return "/".join(parts[:2]) if parts[0] in SPLIT_PACKAGES and len(parts) > 1 else parts[0]


def samples_by_pid(raw_lines, imports: dict[int, Counter] | None = None) -> dict[int, Counter]:
    """py-spy's raw (collapsed) lines -> {pid: Counter(activity -> samples)}; the innermost ``process`` frame
    of a line names the process the stack belongs to (``--subprocesses`` nests them).  ``imports``, when given,
    gets {pid: Counter(package -> samples)} of the import samples (``package``)."""
    found: dict[int, Counter] = defaultdict(Counter)
    for line in raw_lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        pids = [int(m.group(1)) for f in frames if (m := PROCESS.match(f))]
        if not pids:
            continue
        code = [f for f in frames if not PROCESS.match(f) and not f.startswith("thread ")]
        name = activity(code)
        found[pids[-1]][name] += int(count)
        if imports is not None and name == "import":
            imports.setdefault(pids[-1], Counter())[package(code) or "(no module body)"] += int(count)
    return dict(found)


def split(cpu: float, counts: Counter | None, of: Counter | None = None) -> dict[str, float]:
    """One process's CPU seconds shared out by its samples' activities (``counts``); {} when py-spy never sampled
    it.  ``of``: share out ``of``'s keys instead (the import packages), still over all of the process's samples."""
    total = sum(counts.values()) if counts else 0
    return {name: cpu * n / total for name, n in (of if of is not None else counts).items()} if total else {}
