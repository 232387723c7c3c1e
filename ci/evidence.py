"""What one run showed, tied to the revision that ran it: one record shape for CPU matrix cells and GPU runs.

Why one shape: the coverage page must say, for every result, which code produced it.  A record carries the
commit, a hash of what decides the outcome (``compat/``, ``patches/``, ``tests/contract/``: the *suite*), the
pytest arguments, the device, the versions and every test's outcome; a cell's record also carries the blob ids
of the files that decide that cell (``details["inputs"]``, ci/inputs.py).  A cell's record is *stale* when one
of those changed since (ci/inputs.Freshness), a GPU run's when its suite hash differs from the checkout's; one
that can say neither is *legacy*.  Neither is shown as a plain pass.  A test that judged a measurement keeps the
figures it judged (``test["figures"]``, compat.shared.figures) and the record the judge's file hashes
(``details["judge"]``): the page computes each verdict with today's judge (ci/judge.py), and a judge change stales
nothing.  ``python -m ci.evidence stamp`` prints the stamp of this checkout (run on a GPU machine, it is copied
into that run's record).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = 2
#: what decides a contract outcome: the kit, its patch declarations and the contract suite
SUITE_PATHS = ("compat", "patches", "tests/contract")
STATUSES = ("pass", "fail", "plan-no", "lane-broken")
#: freshness of a record against a checkout
CURRENT, STALE, LEGACY = "current", "stale", "legacy"
#: which pipeline a run exercised: the old in-process generator, or the modern `vllm serve` path
PATHS = ("old", "serve")


class RecordError(ValueError):
    """A record file that is not a schema-2 record; printed without a traceback."""


@dataclasses.dataclass
class Record:
    """One run: a matrix cell (``kind="cell"``) or a GPU run (``kind="gpu"``)."""

    name: str  # the cell's tox env name, or the GPU run's name
    kind: str  # "cell" | "gpu"
    status: str  # one of STATUSES
    commit: str | None  # the checkout's HEAD when it ran; None: not known
    dirty: bool | None  # the suite differed from that commit's (uncommitted changes); None: not known
    suite: str | None  # suite_hash() of what ran; None: a legacy record
    pytest_args: list[str] | None  # what pytest was given; None: not known (or no pytest run)
    device: dict | None  # {"kind": "cpu"|"cuda", ...}; None: not known
    versions: dict  # vllm, speculators, torch, transformers, python as installed (missing: not read)
    date: str  # ISO 8601, UTC
    tests: list[dict]  # {"test", "outcome", "seconds", "message"?}
    error: str | None = None
    details: dict = dataclasses.field(default_factory=dict)  # kind-specific facts (a cell's plan, a GPU run's notes)
    schema: int = SCHEMA
    path: str = "old"  # one of PATHS; records written before the modern path had cells are all "old"

    def freshness(self, suite: str) -> str:
        """CURRENT when this record ran the given suite; STALE when another; LEGACY when it carries no hash."""
        if not self.suite:
            return LEGACY
        return CURRENT if self.suite == suite else STALE

    def as_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: dict, where: str = "record") -> "Record":
        if doc.get("schema") != SCHEMA:
            raise RecordError(f"{where}: schema {doc.get('schema')!r}, not {SCHEMA}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(doc) - names
        missing = {f.name for f in dataclasses.fields(cls)
                   if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING} - set(doc)
        if unknown or missing:
            raise RecordError(f"{where}: unknown fields {sorted(unknown)}, missing {sorted(missing)}")
        record = cls(**doc)
        if record.status not in STATUSES or record.kind not in ("cell", "gpu") or record.path not in PATHS:
            raise RecordError(f"{where}: status {record.status!r} / kind {record.kind!r} / path {record.path!r} "
                              "not known")
        return record


def suite_files(root: Path = ROOT) -> list[Path]:
    """The files whose bytes decide a contract outcome (caches and hidden files left out)."""
    found = []
    for top in SUITE_PATHS:
        for path in sorted((root / top).rglob("*")):
            parts = path.relative_to(root).parts
            if path.is_file() and "__pycache__" not in parts and not any(p.startswith(".") for p in parts):
                found.append(path)
    return found


def suite_hash(root: Path = ROOT) -> str:
    """sha256 over each suite file's path and bytes (16 hex digits): equal exactly when the suites are."""
    digest = hashlib.sha256()
    for path in suite_files(root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def git(root: Path, *args: str) -> str | None:
    try:
        proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def stamp(root: Path = ROOT) -> dict:
    """commit, dirty and suite of the checkout at ``root`` (commit and dirty None without git)."""
    commit = git(root, "rev-parse", "HEAD")
    status = git(root, "status", "--porcelain", "--", *SUITE_PATHS) if commit else None
    return {"commit": commit, "dirty": None if status is None else bool(status), "suite": suite_hash(root)}


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def node_id(classname: str, name: str) -> str:
    """pytest's node id of a JUnit testcase: ``tests.contract.test_x.TestY`` -> ``tests/contract/test_x.py::TestY``
    (a class is told from a module by its capital)."""
    parts = classname.split(".")
    cls = [parts.pop()] if parts and parts[-1][:1].isupper() else []
    return "::".join(["/".join(parts) + ".py", *cls, name])


def junit_tests(path: Path) -> list[dict]:
    """Each testcase's node id, outcome, seconds and (for a non-pass) the first line of its message."""
    tests = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for tag, word in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
            found = case.find(tag)
            if found is not None:
                lines = (found.get("message") or found.text or "").strip().splitlines()
                outcome, message = word, (lines[0][:300] if lines else "")
                break
        tests.append({"test": node_id(case.get("classname", ""), case.get("name", "")), "outcome": outcome,
                      "seconds": round(float(case.get("time") or 0), 2), **({"message": message} if message else {})})
    return tests


def with_figures(tests: list[dict], kept: dict[str, list[dict]]) -> list[dict]:
    """``tests`` with each one's kept figures (node id -> figures, compat.shared.figures.read) under ``figures``:
    the measurement its outcome was judged from, judged again by today's judge on the coverage page (ci/judge.py)."""
    out = []
    for test in tests:
        found = kept.get(test["test"])
        out.append({**test, "figures": found} if found else test)
    return out


def status_of(tests: list[dict], exit_code: int = 0) -> str:
    """pass: something ran, nothing failed, pytest agreed; fail otherwise (no test at all is no pass)."""
    ran = any(t["outcome"] == "passed" for t in tests)
    bad = any(t["outcome"] not in ("passed", "skipped") for t in tests)
    return "pass" if exit_code == 0 and ran and not bad else "fail"


def write(record: Record, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{record.name}.json"
    path.write_text(json.dumps(record.as_json(), indent=1, sort_keys=True) + "\n")
    return path


def load(folder: Path) -> dict[str, Record]:
    """Every record in ``folder`` by name; a file that is no schema-2 record is a RecordError."""
    records = {}
    for path in sorted(folder.glob("*.json")):
        try:
            record = Record.from_json(json.loads(path.read_text()), str(path))
        except (ValueError, TypeError) as error:
            raise RecordError(f"{path}: {error}") from None
        if record.name != path.stem:
            raise RecordError(f"{path}: holds the record of {record.name!r}")
        records[record.name] = record
    return records


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args != ["stamp"]:
        print("usage: python -m ci.evidence stamp   # commit, dirty and suite hash of this checkout, as JSON",
              file=sys.stderr)
        return 2
    print(json.dumps(stamp()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
