"""What the wheel ships is the product; the repository's tooling stands on it, never under it.

``compat/`` is what users install: it imports nothing of ``ci/`` (the matrix and its pages), ``fixtures/`` (lanes and
tiny models) or ``tests/``, and registers nothing in a user's pytest (the suites' markers live in tests/).  The
tooling's two halves import in one direction only: ``ci/`` builds on ``fixtures/`` (lanes, uv), ``fixtures/`` never
imports ``ci/``.  Every import counts, one inside a function too.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def imported_tops(folder: str) -> dict[str, set[str]]:
    """Each file under ``folder``: the top-level names its absolute imports reach."""
    out = {}
    for path in (ROOT / folder).rglob("*.py"):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
        out[path.relative_to(ROOT).as_posix()] = names
    return out


def reaching(folder: str, forbidden: set[str]) -> dict[str, list[str]]:
    return {f: sorted(names & forbidden) for f, names in imported_tops(folder).items() if names & forbidden}


def test_the_kit_imports_no_repository_tooling():
    assert reaching("compat", {"ci", "fixtures", "tests", "benchmarks"}) == {}


def test_fixtures_never_import_ci():
    assert reaching("fixtures", {"ci"}) == {}


def test_the_reader_sees_an_import_inside_a_function(tmp_path, monkeypatch):
    """Mutation: a fixtures file importing ci inside a function is caught."""
    (tmp_path / "fixtures").mkdir()
    (tmp_path / "fixtures" / "x.py").write_text("def f():\n    from ci import cell\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert reaching("fixtures", {"ci"}) == {"fixtures/x.py": ["ci"]}


def test_the_wheel_registers_no_pytest_plugin():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "pytest11" not in project.get("entry-points", {})
    assert not (ROOT / "compat" / "pytest_plugin.py").exists()
