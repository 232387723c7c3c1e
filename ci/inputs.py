"""What decides one cell's outcome, and whether any of it changed since the cell's record was written.

Why per cell: a hash over all of ``compat/``, ``patches/`` and ``tests/contract/`` (the *suite*) stales every
record at every commit, so the matrix (hours on 2 cores) is never fresh.  A cell's outcome is decided by

- the harness: the kit (``compat/`` without the probe modules, which are attributed per patch, and without the
  serve path's own modules on an old-path cell), the cell runner (``ci/cell.py`` and what it calls), the
  fixtures, ``pyproject.toml``, and an old-path release's lock;
- the patches the plan can select for that release and speculators: every declaration of the cell's pipeline
  whose version prefilter does not exclude them (out of range, the plan never applies them), with ``_common``;
- the probes: every probe module of the cell's pipeline (the contract suite checks each probe's static claim on
  the running vLLM, tests/contract/test_runtime_probes.py), and those the in-range patches read;
- the test files the cell ran and every helper module beside them (conftest, harnesses, data); a serve cell's are
  those under tests/contract/serve/ and the conftest chain above them with what it imports, not the old path's
  harness beside it, which no serve test loads;
- its release's shipped surface (``compat/surfaces/vllm-<release>.json``) by its presence only: no cell reads a
  surface's probe values (plan, apply and confirm evaluate the install or wheel they are given; only ``compat
  surface diff`` loads them), while the set of files orders the release lines the version prefilters use
  (``registry.release_lines``).  So adding a probe's values to every surface stales no cell.

A record is *stale* when one of these files differs from what it ran with, or when a test file in the
cell's scope is new since then (it never ran there).  A Python file differs when its code does: one whose
comments, docstrings or layout alone changed (:func:`same_code`: the syntax trees without docstrings are equal,
the bytes it ran with read back from git) runs the same instructions, so it stales nothing; every other file
differs by its bytes.  The bytes it ran with are the file hashes the record
carries (``details["inputs"]``, git blob ids, written when it ran), or, for a file it does not list (written
before that, or before the rule counted the file in) and a record from a clean checkout, the tree of its commit
(``dirty`` covers ``compat/``, ``patches/`` and ``tests/contract/``).  ``compat/proof_evidence.py`` is left out: it is generated
from the records themselves, so counting it would stale every cell each time one is refreshed.

The *judge* (``JUDGE_FILES``: the bounds and the code that turns kept figures into a verdict) is left out too: it
decides no measurement, only what a measurement is called.  A record keeps the figures its verdicts were computed
from (compat.shared.figures, compat.serve.judge, the GPU sets' raw runs), and the coverage page computes each
verdict with today's judge (ci/judge.py), so a changed bound re-judges every record in seconds and stales no cell.
A record that kept no figures shows its verdict as run, said to be not re-judgeable where the judge changed since
(``judge_changes``).  What computes a figure (compat/confirm/compare.py's statistics, the harness that drives the
engine) is measurement and stays an input.
"""

from __future__ import annotations

import hashlib
import subprocess
from functools import cached_property
from pathlib import Path

from ci import evidence, table

ROOT = Path(__file__).resolve().parents[1]
HARNESS_FILES = ("ci/cell.py", "ci/evidence.py", "ci/locking.py", "ci/nightly.py", "ci/preload.py",
                 "pyproject.toml", "tests/__init__.py", "tests/conftest.py")
HARNESS_TREES = ("compat", "fixtures")
#: generated from the records (see the module docstring)
GENERATED = ("compat/proof_evidence.py",)
#: the judge: bounds and the rules that turn kept figures into verdicts (module docstring); decides no measurement
JUDGE_FILES = ("compat/shared/tolerance.py", "compat/shared/figures.py", "compat/serve/judge.py",
               "compat/serve/logit_bounds.py")
#: the modern path's own code: it decides no old-path cell
SERVE_ONLY = ("compat/serve/", "tests/contract/serve/")
SERVE_PROBES = "compat/serve/probes/"
PROBES = ("compat/probes/", SERVE_PROBES)
PROBE_HARNESS = ("compat/probes/__init__.py", "compat/probes/base.py", "compat/serve/probes/__init__.py")
SURFACES = "compat/surfaces/"
#: why a shipped surface decides a cell: its presence among the release lines, not its probe values
RELEASE_LIST = "release list"


def code_of(text: str) -> str | None:
    """What of a Python file runs: its syntax tree without comments, layout or docstrings (None: not Python)."""
    import ast

    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body and \
                isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and \
                isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, include_attributes=False)


def blob_id(data: bytes) -> str:
    """git's blob id of ``data``: the same hash a commit's tree holds for a file of these bytes."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _files(root: Path, top: str) -> list[str]:
    base = root / top
    found = base.rglob("*") if base.is_dir() else []
    return sorted(p.relative_to(root).as_posix() for p in found
                  if p.is_file() and "__pycache__" not in p.parts and not p.name.startswith("."))


def _serve_only(path: str) -> bool:
    return path.startswith(SERVE_ONLY)


#: what a serve cell's pytest loads of tests/contract outside serve/: the package and the conftest chain (its
#: markers and fixtures), and the tests.contract modules that conftest imports (``_imported``)
SERVE_CONFTEST = ("tests/contract/__init__.py", "tests/contract/conftest.py")


def _imported(root: Path, path: str) -> set[str]:
    """The ``tests.contract.X`` modules ``path`` imports at any level (unreadable: every helper, as before)."""
    import ast

    try:
        tree = ast.parse((root / path).read_text())
    except (OSError, SyntaxError):
        return {"*"}
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {f"{n.replace('.', '/')}.py" for n in names if n.startswith("tests.contract.")}


def _is_test(path: str) -> bool:
    return Path(path).name.startswith("test_") and path.endswith(".py")


def test_file(node_id: str) -> str:
    """``tests/contract/test_x.py::test_y[a]`` -> ``tests/contract/test_x.py``."""
    return node_id.split("::", 1)[0]


class Inputs:
    """The decisive files of cells, read from the checkout at ``root`` (patch declarations are this checkout's)."""

    def __init__(self, root: Path = ROOT):
        self.root = root
        self._blobs: dict[str, str | None] = {}
        self._texts: dict[str, str | None] = {}
        self._now_texts: dict[str, str] = {}  # blob id -> the text of this checkout's file of that blob
        self._codes: dict[str, str | None] = {}
        self._trees: dict[str, dict[str, str] | None] = {}

    @cached_property
    def _patches(self) -> dict[str, list]:
        from compat import registry

        return {table.OLD: registry.load_patches(), table.SERVE: registry.load_patches("serve")}

    def blob_text(self, blob: str) -> str | None:
        """The text git holds for ``blob`` (None: not in this repository's objects, or not text)."""
        if blob not in self._texts:
            proc = subprocess.run(["git", "-C", str(self.root), "cat-file", "blob", blob], capture_output=True)
            try:
                self._texts[blob] = proc.stdout.decode() if proc.returncode == 0 else None
            except UnicodeDecodeError:
                self._texts[blob] = None
        return self._texts[blob]

    def same_code(self, path: str, before: str | None) -> bool:
        """Whether ``path`` now runs the same code as the blob ``before`` (only comments, docstrings or layout
        differ); False for anything not Python, a file gone, or a blob git does not hold (then its bytes decide)."""
        now = self.blob(path)
        if before is None or now is None or not path.endswith(".py"):
            return False
        old = self.code(before)
        return old is not None and old == self.code(now)

    def code(self, blob: str) -> str | None:
        """:func:`code_of` the blob (this checkout's file of that blob, or git's copy); None: not read or not Python."""
        if blob not in self._codes:
            text = self._now_texts.get(blob)
            text = self.blob_text(blob) if text is None else text
            self._codes[blob] = None if text is None else code_of(text)
        return self._codes[blob]

    def differs(self, path: str, before: str | None) -> bool:
        """Whether ``path`` differs, in what it runs, from the blob ``before`` it had (None: it did not exist)."""
        now = self.blob(path)
        return now != before and not self.same_code(path, before)

    def blob(self, path: str) -> str | None:
        """The blob id of ``path`` in the checkout now (None: no such file)."""
        if path not in self._blobs:
            try:
                data = (self.root / path).read_bytes()
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                self._blobs[path] = None
            else:
                self._blobs[path] = blob_id(data)
                if path.endswith(".py"):
                    try:
                        self._now_texts[self._blobs[path]] = data.decode()
                    except UnicodeDecodeError:
                        pass
        return self._blobs[path]

    def in_range(self, cell: table.Cell, vllm: str | None) -> list:
        """The cell's pipeline's patches whose version prefilter does not rule them out (``vllm`` None: the
        release is not known, e.g. a nightly not run yet: every patch)."""
        from compat import registry, versions

        chosen = []
        for patch in self._patches[cell.path]:
            wanted = {"vllm": vllm, "speculators": cell.speculators}
            outside = False
            for package, spec in patch.versions.items():
                if wanted.get(package) is None:
                    continue
                inside = versions.prefilter(spec, wanted[package], registry.release_lines(package))
                outside = outside or inside is False
            if not outside:
                chosen.append(patch)
        return chosen

    def _patch_files(self, cell: table.Cell, vllm: str | None) -> dict[str, str]:
        from compat.probes import PROBES as NAMED

        found = {}
        base = "patches/serve/" if cell.path == table.SERVE else "patches/"
        for shared in ("__init__.py", "_common.py", "_fence.py"):
            if (self.root / base / shared).is_file():
                found[base + shared] = "patch"
        for patch in self.in_range(cell, vllm):
            found[self._declarations[patch.id]] = "patch"
            for name in (*patch.requires, patch.variant_probe):
                found.update(dict.fromkeys(self._probe_modules(NAMED[name].fn), "probe"))
        return found

    def _probe_modules(self, fn) -> list[str]:
        """The module that defines the probe ``fn`` and every probe module (either path's) it uses by name."""
        import inspect
        import sys

        home = sys.modules[fn.__module__]
        used = {home, *(v if inspect.ismodule(v) else sys.modules.get(getattr(v, "__module__", "") or "")
                        for v in vars(home).values())}
        return sorted(Path(m.__file__).resolve().relative_to(ROOT).as_posix() for m in used
                      if m is not None and m.__name__.startswith(("compat.probes.", "compat.serve.probes."))
                      and getattr(m, "__file__", None))

    @cached_property
    def _declarations(self) -> dict[str, str]:
        """patch id -> its declaration file (``patches/<module>.py``: an id is not a file name)."""
        import importlib

        from compat import registry

        registry._patch_package()
        out = {}
        for base, package in (("patches/", "compat.patches"), ("patches/serve/", "compat.patches.serve")):
            for path in sorted((self.root / base).glob("*.py")):
                if path.name.startswith("_"):
                    continue
                patch = getattr(importlib.import_module(f"{package}.{path.stem}"), "PATCH", None)
                if patch is not None:
                    out[patch.id] = base + path.name
        return out

    def scope_tests(self, cell: table.Cell) -> list[str]:
        """The test files a cell of this pipeline selects from (old: tests/contract without serve/)."""
        tests = _files(self.root, "tests/contract")
        if cell.path == table.SERVE:
            return [p for p in tests if _is_test(p) and p.startswith("tests/contract/serve/")]
        return [p for p in tests if _is_test(p) and not _serve_only(p)]

    def decisive(self, cell: table.Cell, ran: set[str] | None = None, vllm: str | None = None) -> dict[str, str]:
        """relpath -> why it decides the cell (harness, lock, patch, probe, helper, test).

        ``ran``: the test files the record ran (None: every test file of the cell's scope, as when it starts);
        ``vllm``: the release (default: the table's; a nightly's as the record read it)."""
        vllm = vllm or (None if cell.release.vllm == table.NIGHTLY else cell.release.vllm)
        found = {p: "harness" for p in HARNESS_FILES if (self.root / p).is_file()}
        for top in HARNESS_TREES:
            for path in _files(self.root, top):
                if path in GENERATED or path in JUDGE_FILES or (cell.path == table.OLD and _serve_only(path)):
                    continue
                if path.startswith(PROBES) and path not in PROBE_HARNESS:
                    if (cell.path == table.SERVE) == path.startswith(SERVE_PROBES):
                        found[path] = "probe"  # its pipeline's probes: the contract suite checks each one's claim
                    continue
                if path.startswith(SURFACES):
                    if vllm and Path(path).name == f"vllm-{vllm}.json":
                        found[path] = RELEASE_LIST
                    elif not vllm:
                        found[path] = "harness"  # a nightly not run yet: which release it is is not known
                    continue
                found[path] = "harness"
        if vllm:  # present or not: its going away changes the release lines
            found.setdefault(f"{SURFACES}vllm-{vllm}.json", RELEASE_LIST)
        if cell.path == table.OLD and cell.release.vllm != table.NIGHTLY:
            found[cell.release.lock.relative_to(ROOT).as_posix()] = "lock"
        found.update(self._patch_files(cell, vllm))
        shared = self._serve_shared() if cell.path == table.SERVE else None
        for path in _files(self.root, "tests/contract"):
            if cell.path == table.OLD and _serve_only(path):
                continue
            if shared is not None and not (_serve_only(path) or path in shared or "*" in shared):
                continue  # the old path's harness and helpers: no serve test loads them
            if not _is_test(path):
                found[path] = "helper"
        for path in (self.scope_tests(cell) if ran is None else sorted(ran)):
            found[path] = "test"
        return found

    def _serve_shared(self) -> set[str]:
        """tests/contract's files outside serve/ that a serve cell loads: the conftest chain and what it imports."""
        shared = {p for p in SERVE_CONFTEST if (self.root / p).is_file()}
        for path in [p for p in _files(self.root, "tests/contract/serve") if p.endswith(".py")] + list(shared):
            shared |= _imported(self.root, path)
        return shared

    def snapshot(self, cell: table.Cell) -> dict[str, str]:
        """What a record carries when its cell starts: every decisive file's blob id (all scope tests)."""
        return {path: self.blob(path) for path in self.decisive(cell) if self.blob(path) is not None}

    def tree(self, commit: str) -> dict[str, str] | None:
        """path -> blob id at ``commit`` (None: git cannot read it)."""
        if commit not in self._trees:
            proc = subprocess.run(["git", "-C", str(self.root), "ls-tree", "-r", "--full-tree", commit],
                                  capture_output=True, text=True)
            self._trees[commit] = None if proc.returncode else {
                line.split("\t", 1)[1]: line.split()[2] for line in proc.stdout.splitlines() if "\t" in line}
        return self._trees[commit]

    def suite_changes(self, record: evidence.Record) -> list[str] | None:
        """The suite files (``compat/``, ``patches/``, ``tests/contract/``) that differ now from the clean commit a
        GPU run recorded, the generated evidence left out; None when what ran is not known (no commit, uncommitted
        changes, or git cannot read the commit): then the suite rule decides.

        Why: a GPU run cannot be repeated here, and regenerating ``compat/proof_evidence.py`` from that very run's
        record changes the suite hash without changing anything the run exercised."""
        then = self.tree(record.commit) if record.commit and record.dirty is False else None
        if then is None:
            return None
        tops = tuple(f"{top}/" for top in evidence.SUITE_PATHS)
        now = {p.relative_to(self.root).as_posix() for p in evidence.suite_files(self.root)}
        changed = []
        for path in sorted(now | {p for p in then if p.startswith(tops)}):
            if path in GENERATED or path in JUDGE_FILES or not self.differs(path, then.get(path)):
                continue
            state = "is new" if path not in then else "was removed" if path not in now else "changed"
            changed.append(f"{path} {state} since {record.commit[:10]}")
        return changed

    def judge_snapshot(self) -> dict[str, str]:
        """The judge's files' blob ids in the checkout now (what a record is judged by when it is written)."""
        return {path: self.blob(path) for path in JUDGE_FILES if self.blob(path) is not None}

    def judge_changes(self, record: evidence.Record) -> list[str] | None:
        """The judge files that differ now from those that judged ``record`` when it ran ([]: none; None: not
        known).  Read from its ``details["judge"]``, else its inputs (the judge was an input before), else the
        tree of its clean commit."""
        then = record.details.get("judge") or None
        if then is None:
            known = self.recorded(record)
            if known is None:
                return None
            then = known
        changed = []
        for path in JUDGE_FILES:
            now, before = self.blob(path), then.get(path)
            if before is None and path not in then and record.details.get("judge") is None and now is not None:
                continue  # not among what it recorded (written before the file existed): not known to differ
            if self.differs(path, before):
                changed.append(path)
        return changed

    def recorded(self, record: evidence.Record) -> dict[str, str] | None:
        """The blob ids the record ran with: its own, or its clean commit's tree; None when neither is known."""
        if record.details.get("inputs"):
            return record.details["inputs"]
        if record.commit and record.dirty is False:
            return self.tree(record.commit)
        return None

    def changes(self, cell: table.Cell, record: evidence.Record) -> list[str] | None:
        """What changed among the cell's decisive files since ``record`` ran ([]: nothing); None: not known."""
        then = self.recorded(record)
        if then is None:
            return None
        ran = {test_file(t["test"]) for t in record.tests if t.get("test")}
        vllm = record.versions.get("vllm") if cell.release.vllm == table.NIGHTLY else None
        if record.commit and record.dirty is False and then is not self.tree(record.commit):
            # a file the record's own inputs leave out (the rule counted it in later): its clean commit's bytes
            then = {**(self.tree(record.commit) or {}), **then}
        changed = []
        for path, why in self.decisive(cell, ran, vllm).items():
            now, before = self.blob(path), then.get(path)
            if why == RELEASE_LIST and now is not None and before is not None:
                continue  # its presence decides, not its bytes (module docstring)
            if self.differs(path, before):
                state = "is new" if before is None else "was removed" if now is None else "changed"
                changed.append(f"{path} ({why}) {state}")
        for path in self.scope_tests(cell):
            if path not in ran and path not in then:
                changed.append(f"{path} (test) is new: it never ran on this cell")
        return changed


def suite_rule(record: evidence.Record, suite: str) -> tuple[str, str]:
    """The whole-suite rule: current only when the record's suite hash equals ``suite``."""
    state = record.freshness(suite)
    if state == evidence.LEGACY:
        return state, "legacy record, no suite hash"
    if state == evidence.STALE:
        commit = record.commit[:10] if record.commit else "an unrecorded commit"
        return state, f"suite {record.suite[:8]} at {commit}, not this checkout's"
    return state, ""


class Freshness:
    """``judge(record) -> (state, why)``: CURRENT, STALE or LEGACY, per cell (module docstring).

    A GPU run's record is judged by the suite files changed since its clean commit, the generated evidence left out
    (:meth:`Inputs.suite_changes`); it, and a cell record whose inputs are unknown (written from uncommitted changes
    before records carried their inputs), keep the suite rule (:func:`suite_rule`) where that commit is unknown.  ``per_cell=False``: the suite
    rule for every record (a page rendered for a given suite hash, as the tests do)."""

    def __init__(self, data: table.Table | None = None, suite: str | None = None, inputs: Inputs | None = None,
                 per_cell: bool = True):
        self.data = data or table.load()
        self.suite = evidence.suite_hash() if suite is None else suite
        self.inputs = inputs or Inputs()
        self.per_cell = per_cell
        self._cells = {c.name: c for c in self.data.cells(include_serve=True)}

    def __call__(self, record: evidence.Record) -> tuple[str, str]:
        cell = self._cells.get(record.name)
        per_cell = self.per_cell and cell is not None and record.kind == "cell"
        changed = self.inputs.changes(cell, record) if per_cell else None
        if changed is None and self.per_cell and record.kind == "gpu" and record.suite != self.suite:
            changed = self.inputs.suite_changes(record)
        if changed is None:
            return suite_rule(record, self.suite)
        if not changed:
            return evidence.CURRENT, ""
        more = f" and {len(changed) - 2} more" if len(changed) > 2 else ""
        return evidence.STALE, "; ".join(changed[:2]) + more
