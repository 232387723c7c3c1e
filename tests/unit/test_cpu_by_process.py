"""benchmarks/cpu_by_process.py: every process of the tree counted, orphans included, each under its role."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "benchmarks" / "cpu_by_process.py"
PY = sys.executable  # not a pyenv shim, whose shells would be counted too
BURN = "import time; t = time.process_time()\nwhile time.process_time() - t < 0.6: pass"


def _run(shell: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), "--interval", "0.05", "--", "bash", "-c", shell],
                          capture_output=True, text=True, timeout=120)


def test_an_orphan_outliving_the_command_is_counted_and_the_exit_code_kept():
    """The command starts a burner in a subshell (an orphan once the shell exits) and exits 3 at once: the exact
    total still holds the orphan's 0.6 CPU seconds (it is reaped by the tool), and the tool exits 3."""
    proc = _run(f"({PY} -c '{BURN}' &); exit 3")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    exact = float(re.search(r"CPU ([\d.]+) s exact", proc.stdout).group(1))
    assert exact >= 0.55, proc.stdout
    assert re.search(r"^python -c \(a probe or import\)\s+1\s+0\.[5-9]", proc.stdout, re.M), proc.stdout


def test_each_process_is_listed_under_its_role_by_its_command_line():
    proc = _run(f"{PY} -c '{BURN}'; {PY} -m compat.apply --help >/dev/null; true")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    roles = dict(re.findall(r"^(\S[^\n]*?)\s{2,}(\d+)\s+[\d.]+\s+\d+%$", proc.stdout, re.M))
    assert roles.get("python -c (a probe or import)") == "1", proc.stdout
    assert roles.get("compat apply (a tree written)") == "1" and roles.get("shell") == "1", proc.stdout


# -- --stacks: each process's CPU split by what py-spy saw it doing ------------------------------------------

RAW = """\
process 10:"python -m tests.contract.harness";<module> (harness.py:1);_find_and_load (<frozen importlib._bootstrap>:1);<module> (vllm/__init__.py:3) 6
process 10:"python -m tests.contract.harness";run (harness.py:9);execute_model (vllm/v1/executor/abstract.py:5);collective_rpc (x.py:1);sched_yield (vllm/distributed/utils.py:46) 3
process 10:"python -m tests.contract.harness";run (harness.py:9);forward (transformers/models/llama/modeling_llama.py:7) 1
process 10:"python -m tests.contract.harness";process 11:"VLLM::Worker";load_model (vllm/v1/worker/gpu_model_runner.py:2);_find_and_load (<frozen importlib._bootstrap>:1) 2
process 10:"python -m tests.contract.harness";process 11:"VLLM::Worker";load_model (vllm/v1/worker/gpu_model_runner.py:2);load_weights (vllm/model_executor/models/llama.py:4) 2
not a sample line
"""


def test_a_stack_is_the_first_activity_any_of_its_frames_matches_and_belongs_to_its_innermost_process():
    """Hand-written py-spy lines: a spin inside execute_model is a spin, an import inside load_model an import,
    and the worker's lines (nested under the harness) are the worker's."""
    from benchmarks.stack_activity import samples_by_pid

    found = samples_by_pid(RAW.splitlines())
    assert dict(found[10]) == {"import": 6, "spin on vLLM's message queue": 3,
                               "HF reference (transformers forward)": 1}
    assert dict(found[11]) == {"import": 2, "model load": 2}


def test_a_processs_cpu_is_shared_out_by_its_samples():
    from collections import Counter

    from benchmarks.stack_activity import split

    assert split(8.0, Counter({"import": 6, "other": 2})) == {"import": 6.0, "other": 2.0}
    assert split(3.0, None) == {} and split(3.0, Counter()) == {}


IMPORT_BURN = "import time; t = time.process_time()\nwhile time.process_time() - t < 1.0: pass\n"


def test_stacks_splits_a_real_processs_cpu_between_its_import_and_its_own_loop(tmp_path):
    """A real interpreter under py-spy: 1 CPU-s burnt while importing a module, then 1 CPU-s in a plain loop;
    the tool gives the import about half of that process's CPU."""
    (tmp_path / "slow_module.py").write_text(IMPORT_BURN)
    script = tmp_path / "main.py"
    script.write_text("import slow_module\n" + IMPORT_BURN.replace("import time; ", "import time\n"))
    proc = subprocess.run([sys.executable, str(TOOL), "--stacks", "--stacks-rate", "50", "--interval", "0.05", "--",
                           PY, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    if "py-spy wrote no" in proc.stdout and re.search(r"Permission denied|ptrace|Operation not permitted", proc.stderr):
        import pytest

        pytest.skip(f"NOT RUN: py-spy cannot read another process on this host: {proc.stderr.strip()[-300:]}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    table = proc.stdout.split("## CPU by activity", 1)[1]
    cpu = dict((name, float(s)) for name, s in re.findall(r"^(import|other)\s+([\d.]+)\s+\d+%$", table, re.M))
    assert set(cpu) == {"import", "other"}, proc.stdout
    assert 0.3 < cpu["import"] / (cpu["import"] + cpu["other"]) < 0.7, proc.stdout


def test_an_import_sample_goes_to_the_package_whose_module_body_runs():
    """The innermost ``<module>`` frame decides: vllm/__init__ importing torch/_inductor is torch/_inductor's."""
    from collections import Counter

    from benchmarks.stack_activity import samples_by_pid, split

    imports = {}
    raw = ['process 5:"python";<module> (vllm/__init__.py:1);_find_and_load (<frozen importlib._bootstrap>:1);'
           '<module> (torch/_inductor/lowering.py:3) 3',
           'process 5:"python";<module> (vllm/__init__.py:1);_find_and_load (<frozen importlib._bootstrap>:1);'
           '<module> (openai/__init__.py:2) 1',
           'process 5:"python";main (x.py:1) 4']
    counts = samples_by_pid(raw, imports)
    assert dict(imports[5]) == {"torch/_inductor": 3, "openai": 1}
    assert split(8.0, counts[5], imports[5]) == {"torch/_inductor": 3.0, "openai": 1.0}
    assert split(8.0, Counter(), imports[5]) == {}
