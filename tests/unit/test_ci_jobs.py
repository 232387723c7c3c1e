"""ci/jobs.py runs .ci/run's one-core jobs N at a time; its exit says whether every job passed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def jobs(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ci.jobs", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def test_each_line_names_its_job_and_one_failure_fails_the_whole():
    proc = jobs("--jobs", "2", "a=echo one", "b=sh -c 'echo two; exit 3'", "c=echo three")
    assert proc.returncode == 1, proc.stdout
    assert "[a] one" in proc.stdout and "[b] two" in proc.stdout and "[c] three" in proc.stdout
    assert "== job b: exit 3" in proc.stdout and "b exit 3" in proc.stdout.splitlines()[-1]


def test_every_job_passing_is_exit_0():
    proc = jobs("a=true", "b=true")
    assert proc.returncode == 0 and "a exit 0" in proc.stdout and "b exit 0" in proc.stdout


def test_two_at_a_time_means_two_and_no_more(tmp_path):
    """Three jobs of 1 s each, two at a time: the jobs' own start and end stamps overlap two deep, never three
    (read from the stamps, not the wall clock, which a busy machine stretches)."""
    log = tmp_path / "stamps"
    stamp = f"echo $(date +%s.%N) {{}} {{}} >> {log}"
    proc = jobs("--jobs", "2", *(f"j{k}=sh -c '{stamp.format(1, k)}; sleep 1; {stamp.format(-1, k)}'" for k in range(3)))
    assert proc.returncode == 0, proc.stdout
    events = sorted((float(t), int(step)) for t, step, _ in (line.split() for line in log.read_text().splitlines()))
    assert len(events) == 6, events
    depth = [sum(step for _, step in events[:i + 1]) for i in range(len(events))]
    assert max(depth) == 2, events


def test_a_command_that_cannot_start_fails_its_job_not_the_runner():
    proc = jobs("a=/no/such/program", "b=true")
    assert proc.returncode == 1 and "cannot start" in proc.stdout and "b exit 0" in proc.stdout


def test_bad_job_specs_are_usage_errors():
    for args in (["nameonly"], ["=echo"], ["a=echo", "a=echo"], ["--jobs", "0", "a=true"]):
        proc = jobs(*args)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (args, proc.stderr)


def test_each_job_reports_the_cpu_of_its_process_tree():
    """A job whose child burns ~1 CPU-s reports about that much CPU; a job that only sleeps reports almost none."""
    burn = f"{sys.executable} -c \"import subprocess, sys; subprocess.run([sys.executable, '-c', " \
           f"'import time; t = time.process_time(); exec(\\'while time.process_time() - t < 1: pass\\')'])\""
    proc = jobs("--jobs", "2", f"burn={burn}", "idle=sleep 1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = {w.split()[2].rstrip(":"): w for w in proc.stdout.splitlines() if w.startswith("== job ")}

    def cpu(name: str) -> int:
        text = line[name].split(", ", 1)[1]  # "0 min 1 s CPU (...)"
        minutes, _, seconds, *_ = text.split()
        return int(minutes) * 60 + int(seconds)

    assert cpu("burn") >= 1 and cpu("idle") == 0, proc.stdout


def test_ci_runs_phase_clock_counts_the_cpu_of_each_phase():
    """.ci/run's own ``timed`` (taken from the script, not copied): a phase burning ~2 CPU-s says so, a sleep none."""
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    first = lines.index('took=""')
    last = next(i for i in range(lines.index("timed() {"), len(lines)) if lines[i] == "}")
    burn = f"{sys.executable} -c 'import time; t = time.process_time()\nwhile time.process_time() - t < 2.2: pass'"
    script = "\n".join(lines[first:last + 1] + [f'timed "burn" {burn}', 'timed "idle" sleep 1', 'echo "$took"'])
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60).stdout
    assert "burn 0 min " in out and "(0 min 2 s CPU)" in out.split(";")[0], out
    assert "idle 0 min 1 s (0 min 0 s CPU)" in out, out


def test_a_job_after_another_starts_only_once_it_ended_whatever_its_exit(tmp_path):
    """b comes --after a (which fails): b's start stamp is after a's end stamp, though a slot was free all along;
    c, with no order, starts at once beside a."""
    log = tmp_path / "stamps"
    stamp = f"echo $(date +%s.%N) {{}} >> {log}"
    proc = jobs("--jobs", "2", "--after", "b=a",
                f"a=sh -c '{stamp.format('a-start')}; sleep 1; {stamp.format('a-end')}; exit 4'",
                f"b=sh -c '{stamp.format('b-start')}'", f"c=sh -c '{stamp.format('c-start')}'")
    assert proc.returncode == 1 and "== job a: exit 4" in proc.stdout and "b exit 0" in proc.stdout, proc.stdout
    at = {what: float(t) for t, what in (line.split() for line in log.read_text().splitlines())}
    assert at["b-start"] >= at["a-end"] > at["c-start"], at


def test_an_optional_job_that_would_overrun_the_budget_is_not_run_and_fails_nothing():
    proc = jobs("--budget", "1", "--optional", "late=5", "--optional", "soon=0.5", "late=echo ran", "soon=echo ran too")
    assert proc.returncode == 0, proc.stdout
    assert "== job late: NOT RUN, at minute 0 of the pool's 1" in proc.stdout and "[late] ran" not in proc.stdout
    assert "[soon] ran too" in proc.stdout and "late NOT RUN" in proc.stdout.splitlines()[-1]


def test_the_pool_says_how_busy_the_machine_was():
    proc = jobs("a=true")
    assert proc.returncode == 0 and "the machine's busy cores over the pool: " in proc.stdout, proc.stdout
    said = proc.stdout.split("busy cores over the pool: ")[1].split(")")[0]
    assert said == "not read" or said.endswith(f" of {__import__('os').cpu_count()}"), said


def test_orders_and_options_that_cannot_be_followed_are_usage_errors():
    for args in (["--after", "b=nosuch", "b=true"], ["--after", "a=b", "--after", "b=a", "a=true", "b=true"],
                 ["--optional", "a=5", "a=true"], ["--budget", "9", "--optional", "a=x", "a=true"],
                 ["--budget", "9", "--optional", "zz=1", "a=true"], ["--after", "a", "a=true"]):
        proc = jobs(*args)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (args, proc.stderr)
