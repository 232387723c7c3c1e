"""Turn records downloaded from hosted CI (the workflow's ``record-<cell>`` artifacts) into this checkout's records.

    python -m ci ingest DIR [DIR ...] [--commit SHA]

Why checks: a record is evidence about the code that ran it.  One is taken only when it is a well-formed cell
record of a cell in the table, ran a clean checkout (``dirty`` false) of the expected commit (default: this
checkout's HEAD; the workflow's coverage job runs on the commit its cell jobs ran), and carries the suite hash
of this checkout, so its figures are vouched for at this commit.  A refused record changes nothing and is
named with its reason; a record older than the one already here is kept out too.
"""

from __future__ import annotations

import json
from pathlib import Path

from ci import cell, evidence, table


def check(record: evidence.Record, cells: set[str], commit: str, suite: str) -> str | None:
    """Why ``record`` cannot be taken (None: it can)."""
    if record.kind != "cell" or record.name not in cells:
        return f"not a cell of ci/releases.toml ({record.kind} {record.name!r})"
    if record.commit != commit:
        return f"ran commit {record.commit or 'unknown'}, not {commit}"
    if record.dirty is not False:
        return "ran a checkout with uncommitted changes (or did not say)"
    if record.suite != suite:
        return f"suite hash {record.suite or 'none'}, not this checkout's {suite}"
    return None


def ingest(folders: list[Path], records: Path = cell.RECORDS, commit: str | None = None,
           root: Path = evidence.ROOT) -> tuple[list[str], list[str]]:
    """(taken, refused): one line each; only taken records are written into ``records``."""
    stamp = evidence.stamp(root)
    commit = commit or stamp["commit"]
    if commit is None:
        raise evidence.RecordError(f"{root} is no git checkout: give --commit")
    if len(commit) < 40:
        commit = evidence.git(root, "rev-parse", commit) or commit
    cells = {c.name for c in table.load().cells(include_serve=True)}
    here = evidence.load(records) if records.is_dir() else {}
    taken, refused = [], []
    files = sorted(p for folder in folders for p in (folder.rglob("*.json") if folder.is_dir() else [folder]))
    for path in files:
        try:
            record = evidence.Record.from_json(json.loads(path.read_text()), str(path))
        except (ValueError, TypeError, OSError) as error:
            refused.append(f"{path}: {error}")
            continue
        why = check(record, cells, commit, stamp["suite"])
        if why is None and record.name in here and here[record.name].date > record.date:
            why = f"older ({record.date}) than the record here ({here[record.name].date})"
        if why:
            refused.append(f"{path}: {why}")
            continue
        evidence.write(record, records)
        taken.append(f"{record.name}: {record.status} ({record.date}, from {path})")
    return taken, refused


def main(args) -> int:
    taken, refused = ingest([Path(f) for f in args.folders], commit=args.commit)
    for line in taken:
        print(f"took {line}")
    for line in refused:
        print(f"refused {line}")
    if not taken and not refused:
        print("error: no record (*.json) found there", flush=True)
        return 2
    print(f"== ingest: {len(taken)} taken, {len(refused)} refused" +
          ("; run python -m ci coverage" if taken else ""))
    return 1 if refused else 0
