"""``python ci/gpu/serve_summary.py docs/gpu/serve``: one summary.json from the calls' records.jsonl files.

Why: each device call brings back one records file (a JSON line per serve run); the README's table and a reader
want every run side by side, with the verdict, the bound, the worst error per row and the reason's key line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

KEYS = ("expanded size", "No valid attention backend", "Error", "exited")


def key_line(reason: str) -> str:
    """The reason's most telling line: the upstream error text, where there is one."""
    lines = reason.splitlines()
    for key in KEYS:
        hits = [line for line in lines if key in line]
        if hits:
            return hits[-1].split("] ", 1)[-1][:300]
    return lines[0][:300] if lines else ""


def summary(folder: Path) -> list[dict]:
    out = []
    for path in sorted(folder.glob("call*_records.jsonl")):
        stamp = folder / path.name.replace("_records.jsonl", "_stamp.json")  # the suite hash of the tree that ran
        suite = json.loads(stamp.read_text())["suite"] if stamp.is_file() else "not recorded"
        for line in path.read_text().splitlines():
            run = json.loads(line)
            outcome = run["outcome"]
            hf = outcome["checks"].get("hf_rows", {})
            out.append({"call": path.name.split("_")[0], "name": run["name"], "at": run["at"],
                        "dtype": run["spec"]["dtype"], "verdict": outcome["verdict"],
                        "failed_checks": [k for k, c in outcome["checks"].items() if not c.get("ok")],
                        "rule": hf.get("rule"), "worst_per_row": outcome["rows"],
                        "logprobs": outcome["checks"].get("logprobs"), "key_line": key_line(outcome["reason"]),
                        "server_start_s": outcome["timings"].get("server_start_s"), "versions": run["versions"],
                        "commit": run.get("commit", "not recorded"), "suite": suite})
    return sorted(out, key=lambda r: r["at"])


if __name__ == "__main__":
    folder = Path(sys.argv[1])
    (folder / "summary.json").write_text(json.dumps(summary(folder), indent=1) + "\n")
