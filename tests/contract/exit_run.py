"""p37's exit run (speculators.generator.quiet_del_at_exit), started by the harness beside its other runs.

A user's script builds the generator, runs it and exits with it alive; beside it lives a twin of the same class
loaded from the installed file with p37's edit undone (tests/contract/test_generator_exit.py says why and what
is judged).  It is a new interpreter with vLLM's spawned worker, as a user's script is, so it costs ~15 s of wall
time; the harness starts it with the full set on disk, in step 1 beside compat confirm's command line, and waits
until it has generated (every speculators file read) before writing any other tree (run alone after the harness, it
would add its own time to every cell).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from compat.layout import GENERATOR

PATCH_ID = "speculators.generator.quiet_del_at_exit"

SCRIPT = """
import importlib.util, sys
from speculators.data_generation import vllm_hidden_states_generator as installed
if __name__ == "__main__":  # vLLM spawns its worker on CPU: it imports this file as __mp_main__
    spec = importlib.util.spec_from_file_location("speculators.data_generation.without_quiet_del", sys.argv[2])
    without = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = without
    spec.loader.exec_module(without)
    dtype = {"dtype": sys.argv[3]} if len(sys.argv) > 3 else {}  # 'auto' unless the harness names one
    gen = installed.VllmHiddenStatesGenerator(sys.argv[1], layer_ids=[0, 1], max_model_len=512,
                                              tensor_parallel_size=1, **dtype)
    out = gen.generate([[5, 6, 7, 8, 9]])
    twin = object.__new__(without.VllmHiddenStatesGenerator)
    twin.executor = gen.executor
    print("generated", len(out), flush=True)
"""
#: printed once the script has generated: every speculators file it uses has been read, its worker's too
READ = "generated "


def patch():
    from compat.registry import load_patches

    return next(p for p in load_patches() if p.id == PATCH_ID)


def installed_generator() -> Path:
    """The installed generator's file, found without importing speculators (the harness forks children later)."""
    from compat.patcher import open_target

    return Path(open_target("speculators").path(GENERATOR))


def without_p37(installed: str) -> str:
    """The installed generator's text with p37's edit undone (every other patch kept)."""
    edits = [e for variant in patch().edits.values() for e in variant[GENERATOR]]
    applied = [e for e in edits if e.replacement in installed]
    if not applied:
        raise RuntimeError("p37 is not on disk: the lane must hold every needed patch")
    return installed.replace(applied[0].replacement, applied[0].anchor, 1)


def start(model: str, out_dir: Path, dtype: str | None = None) -> dict:
    """The script in a new interpreter (its worker spawned by vLLM), the installed files holding the full set;
    ``dtype`` passed to the generator (p02's argument) where 'auto' cannot run on this host (amx_host.py)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    installed = installed_generator()
    variant = out_dir / "without_quiet_del.py"
    variant.write_text(without_p37(installed.read_text()))
    script = out_dir / "exit_with_a_live_generator.py"
    script.write_text(SCRIPT)
    stdout, stderr = out_dir / "exit.stdout", out_dir / "exit.stderr"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # a user's script: the lane as installed
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        proc = subprocess.Popen([sys.executable, str(script), model, str(variant), *([dtype] if dtype else [])],
                                stdout=out, stderr=err,
                                cwd=out_dir, env=env)
    return {"proc": proc, "started": time.monotonic(), "installed": str(installed), "variant": str(variant),
            "stdout": stdout, "stderr": stderr}


def wait_until_read(started: dict, limit_s: float = 600) -> None:
    """Until the script has generated (or ended): the files on disk may change after that."""
    deadline = time.monotonic() + limit_s
    while started["proc"].poll() is None and READ not in started["stdout"].read_text(errors="replace"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the exit run did not generate within {limit_s} s")
        time.sleep(0.1)


def finish(started: dict, limit_s: float = 900) -> dict:
    proc = started["proc"]
    try:
        proc.wait(timeout=limit_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return {"returncode": proc.returncode, "stdout": started["stdout"].read_text(errors="replace"),
            "stderr": started["stderr"].read_text(errors="replace"), "installed": started["installed"],
            "variant": started["variant"], "seconds": round(time.monotonic() - started["started"], 2)}
