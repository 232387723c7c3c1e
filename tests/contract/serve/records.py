"""A run's outcome kept as data: ``save(name, doc)`` writes ``<cache>/serve-runs/records/<lane>/<name>.json`` with the
commit (and whether the tree was clean), the lane, the versions and the device, so a figure on a docs page can
name the record it came from (docs/records/self-reference/ holds the copies the pages cite)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def save(name: str, doc: dict) -> Path:
    from ci.gpu.serve_records import versions
    from compat.layout import cache_root
    from compat.serve.options import served_device

    def git(*argv):
        return subprocess.run(["git", *argv], capture_output=True, text=True, cwd=ROOT).stdout.strip()

    lane = os.environ.get("SPECDEC_COMPAT_LANE", "adhoc")
    record = {"name": name, "commit": git("rev-parse", "HEAD"),
              "tree": "clean" if not git("status", "--porcelain", "--untracked-files=no") else "modified",
              "lane": lane, "device": served_device(), "versions": versions(),
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **doc}
    path = cache_root() / "serve-runs" / "records" / lane / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1, default=str) + "\n")
    return path
