"""ci/jobs.py runs .ci/run's one-core jobs N at a time; its exit says whether every job passed."""

from __future__ import annotations

import subprocess
import sys
import time
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
    """Three jobs of 1 s each, two at a time: about 2 s, never 1 (all three at once) nor 3 (one at a time)."""
    started = time.monotonic()
    proc = jobs("--jobs", "2", *(f"j{k}=sleep 1" for k in range(3)))
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout
    assert 1.9 < elapsed < 2.9, elapsed


def test_a_command_that_cannot_start_fails_its_job_not_the_runner():
    proc = jobs("a=/no/such/program", "b=true")
    assert proc.returncode == 1 and "cannot start" in proc.stdout and "b exit 0" in proc.stdout


def test_bad_job_specs_are_usage_errors():
    for args in (["nameonly"], ["=echo"], ["a=echo", "a=echo"], ["--jobs", "0", "a=true"]):
        proc = jobs(*args)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (args, proc.stderr)
