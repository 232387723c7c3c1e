"""The GPU lane's CUDA touches (ci/gpu/cuda_touch.py), run through fork_probe's child exactly as on the GPU.

On a machine without a GPU the touches that only ask (none, import_torch, is_available, device_count) must
leave the parent uninitialised and the fork good (torch registers its bad-fork handler only once CUDA is
initialised), and the child's CUDA tensor must fail; ``init`` must fail in the parent.  The lead runs
fork_probe on a GPU for the other side.  Needs torch (skipped where it is absent, as in the unit venv; the
lane venvs have it).
"""

import json
import subprocess
import sys

import pytest

from ci.gpu import cuda_touch

ASKING = ("none", "import_torch", "is_available", "device_count")


def _no_gpu_torch():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: fork_probe's GPU run covers it")
    return torch


def test_an_unknown_touch_is_refused_before_torch_is_imported(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # importing torch would now raise ImportError
    with pytest.raises(ValueError, match="unknown touch 'is_initialized'"):
        cuda_touch.touch("is_initialized")
    cuda_touch.touch("none")  # touches nothing, imports nothing


def test_both_probes_name_the_same_touches():
    from ci.gpu import fork_probe

    assert set(cuda_touch.TOUCHES) <= set(fork_probe.TOUCHES)
    assert cuda_touch.TOUCHES == ("none", "is_available", "device_count", "init")  # what the GPU records name


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """fork_probe run as device.sh runs it (a script, from another directory), every touch in its own child."""
    torch = _no_gpu_torch()
    from ci.gpu import fork_probe

    cwd = tmp_path_factory.mktemp("fork_probe")
    proc = subprocess.run([sys.executable, fork_probe.__file__, str(cwd / "fork_probe.json")], cwd=cwd,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return torch, json.loads((cwd / "fork_probe.json").read_text())


def test_every_touch_is_recorded(records):
    from ci.gpu import fork_probe

    assert tuple(records[1]) == fork_probe.TOUCHES


@pytest.mark.parametrize("touch", ASKING)
def test_asking_touches_leave_the_fork_good_without_a_gpu(records, touch):
    result = records[1][touch]
    assert "rc" not in result, result.get("stderr")
    assert result["parent"] == {"is_initialized": False}
    assert result["child"]["bad_fork"] is False
    assert result["child"]["child_cuda"] != "ok"


def test_init_fails_in_the_parent_without_a_gpu(records):
    torch, result = records[0], records[1]["init"]
    assert result.get("rc", 0) != 0, result
    if torch.version.cuda is None:  # a CPU build of torch says why
        assert "Torch not compiled with CUDA enabled" in result["stderr"]


def test_fork_probe_finds_the_touches_as_a_script_from_anywhere(tmp_path):
    """device.sh runs ``python3 ci/gpu/fork_probe.py``: the script finds ci.gpu.cuda_touch itself (no torch needed)."""
    from ci.gpu import fork_probe

    code = ("import runpy, sys; sys.argv = ['fork_probe.py']; "
            f"ns = runpy.run_path({str(fork_probe.__file__)!r}); print(ns['TOUCHES'])")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == repr(fork_probe.TOUCHES)
