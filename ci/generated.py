"""Files generated from the release table or the records (tox.ini, the workflow, docs/coverage.md): write or check.

Why one function: each generated file is committed, and ``--check`` (and a unit test) must say the same thing
for each when it drifts from its source.
"""

from __future__ import annotations

from pathlib import Path


def write(path: Path, rendered: str, check: bool, command: str) -> int:
    """Write ``rendered`` to ``path`` (0), or with ``check`` say whether it is current (0) or stale (1)."""
    current = path.read_text() if path.exists() else ""
    if check:
        if current != rendered:
            print(f"{path} is stale: run {command}")
            return 1
        print(f"{path} is current")
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(rendered)
    print(f"wrote {path}")
    return 0
