"""Two lanes building the same cached model at once: one builds, the other waits and finds it built
(fixtures/build_lock.py; `.ci/run` runs two lanes at the same time)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# a builder that checks its stamp, then takes 1.5 s to "write" the model, as build_tiny_llama does
BUILDER = """
import json, os, sys, time
sys.path.insert(0, {root!r})
from fixtures.build_lock import one_builder_at_a_time

@one_builder_at_a_time
def build(path):
    stamp = os.path.join(path, "stamp")
    if os.path.exists(stamp):
        print("found", flush=True)
        return
    os.makedirs(path, exist_ok=True)
    start = time.time()
    time.sleep(1.5)
    with open(stamp, "w") as f:
        f.write("done")
    print("built", start, time.time(), flush=True)

build(sys.argv[1])
"""


def test_a_second_builder_waits_and_finds_the_model_built(tmp_path):
    script = tmp_path / "builder.py"
    script.write_text(BUILDER.format(root=str(ROOT)))
    model = tmp_path / "models" / "tiny"
    procs = [subprocess.Popen([sys.executable, str(script), str(model)], stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    outputs = sorted(p.communicate(timeout=60)[0].split()[0] for p in procs)
    assert [p.returncode for p in procs] == [0, 0]
    assert outputs == ["built", "found"], outputs  # without the lock both build, one over the other


def test_the_lock_is_released_when_the_build_fails(tmp_path):
    from fixtures.build_lock import exclusive

    folder = tmp_path / "m"
    try:
        with exclusive(folder):
            raise RuntimeError("build failed")
    except RuntimeError:
        pass
    with exclusive(folder):  # would block forever if the first were still held by this process's other fd
        pass
