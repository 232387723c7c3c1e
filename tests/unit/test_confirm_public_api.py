"""No test reaches into compat's private names, and none rebinds a name of compat.confirm.

The contract harness imported nine private names of compat.confirm and monkeypatched ``_tie_to_files`` and
``release_zmq`` at run time: a refactor of confirm broke the tests, or worse, the tests ran other code than users
do.  What a test needs is public (``compat.confirm.run(RunSpec(...))`` with its hooks, the rooms' public names).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _compat_aliases(tree) -> dict:
    """Names bound to compat modules or their members (``name -> dotted source``); a name that some import of
    the file also binds to another package is left out (``registry`` may be vLLM's)."""
    names, elsewhere = {}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                local = alias.asname or alias.name.split(".")[0]
                if alias.name.split(".")[0] == "compat":
                    names[local] = alias.name if alias.asname else "compat"
                else:
                    elsewhere.add(local)
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (node.module or "").split(".")[0] == "compat":
                    names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                else:
                    elsewhere.add(alias.asname or alias.name)
    return {name: source for name, source in names.items() if name not in elsewhere}


def offences(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "compat":
            found += [f"imports {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    aliases = _compat_aliases(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            if node.attr.startswith("_") and not node.attr.startswith("__"):
                found.append(f"line {node.lineno}: {node.value.id}.{node.attr} (private)")
            if isinstance(node.ctx, ast.Store) and aliases[node.value.id].startswith("compat.confirm"):
                found.append(f"line {node.lineno}: rebinds {aliases[node.value.id]}.{node.attr}")
    return found


def test_no_test_uses_a_private_name_of_compat_or_rebinds_one_of_confirms():
    bad = {}
    for path in sorted((ROOT / "tests").rglob("*.py")):
        found = offences(path)
        if found:
            bad[path.relative_to(ROOT).as_posix()] = found
    assert bad == {}


def test_the_checker_sees_what_the_harness_did(tmp_path):
    """The two shapes of the old harness are caught (the checker can fail)."""
    sample = tmp_path / "old_harness.py"
    sample.write_text("from compat import confirm\nfrom compat.confirm import _tie_to_files\n"
                      "tie = confirm._tie_to_files\nconfirm.release_zmq = None\n")
    found = offences(sample)
    assert "imports compat.confirm._tie_to_files" in found
    assert any("confirm._tie_to_files (private)" in f for f in found)
    assert any("rebinds compat.confirm.release_zmq" in f for f in found)
