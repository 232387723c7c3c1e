"""Where each modern-path (serve) patch's leave-one-out proof lives in this repository, and what its records say.

Why in ci/: the proof tests and the serve cells' records are the repository's, not the product's.  A contract proof
on a real ``vllm serve`` is ``tests/contract/serve/test_kN_proof.py`` for the declaration ``patches/serve/kN_*.py``;
a proof on the released file (no server) is a test of ``tests/unit/test_serve_patch_proofs.py`` that names the patch
id; the serve cells' records (``docs/coverage/records``, ``"path": "serve"``) say where the contract proof passed.
The installed kit knows only the evidence shipped in the package (compat.serve.proofs); a root without ``tests/``
reads that too, so both views give one answer where the repository is absent.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

from compat.serve import proofs as shipped_proofs

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = "tests/contract/serve"
UNIT = "tests/unit/test_serve_patch_proofs.py"
RECORDS = "docs/coverage/records"


def module_key(patch) -> str | None:
    """``k1`` for the declaration defined in ``patches/serve/k1_cpu_connector.py`` (None: not a kN_ module)."""
    for name, module in list(sys.modules.items()):
        if ".serve." in name and getattr(module, "PATCH", None) is patch:
            match = re.match(r"(k\d+)_", name.rsplit(".", 1)[-1])
            return match.group(1) if match else None
    return None


def contract_proof(patch, root: Path = ROOT) -> str | None:
    """The contract proof module of ``patch`` (a path relative to ``root``), if the repository has one."""
    key = module_key(patch)
    path = root / CONTRACT / f"test_{key}_proof.py"
    return path.relative_to(root).as_posix() if key and path.is_file() else None


def unit_proofs(patch, root: Path = ROOT) -> list[str]:
    """The tests of the released-file proofs that name ``patch``'s id (node ids)."""
    path = root / UNIT
    if not path.is_file():
        return []
    found = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_") and any(
                isinstance(c, ast.Constant) and c.value == patch.id for c in ast.walk(node)):
            found.append(f"{UNIT}::{node.name}")
    return found


def serve_records(root: Path = ROOT) -> list[dict]:
    """The serve cells' records (name, vLLM version, runner, tests), by name; the runner is the one the record names
    (compat.proven.runner_from: one naming none ran V1), so a V2 cell's proof reads as V2's."""
    from compat.proven import named_runners, runner_from

    out = []
    for path in sorted((root / RECORDS).glob("*.json")):
        doc = json.loads(path.read_text())
        if doc.get("path") == "serve":
            vllm = (doc.get("versions") or {}).get("vllm")
            out.append({"name": doc["name"], "vllm": vllm,
                        "runner": runner_from(named_runners(doc.get("details") or {}), vllm),
                        "tests": {t["test"]: t["outcome"] for t in doc.get("tests") or []}})
    return out


def outcome_in(record: dict, module: str) -> str | None:
    """The proof module's outcome in one record: failed, passed, skipped, or None (not run there)."""
    outcomes = [o for test, o in record["tests"].items() if test.startswith(module + "::")]
    if not outcomes:
        return None
    if any(o not in ("passed", "skipped") for o in outcomes):
        return "failed"
    return "passed" if "passed" in outcomes else "skipped"


def found(patch, root: Path = ROOT) -> tuple[str | None, list[tuple[str, str, str, str]], list[str]] | None:
    """(contract proof module, its (record, vLLM, outcome, runner) per serve record that ran it, unit proofs); None
    where ``root`` has no tests/ to read."""
    if not (root / "tests").is_dir():
        return None
    module = contract_proof(patch, root)
    seen = [(r["name"], r["vllm"], outcome_in(r, module), r["runner"]) for r in serve_records(root)] if module else []
    return module, [row for row in seen if row[2]], unit_proofs(patch, root)


def status(patch, root: Path = ROOT) -> str:
    """The proof status in words: which proof exists, and where its contract proof passed or failed."""
    proofs = found(patch, root)
    if proofs is None:
        return shipped_proofs.status(patch)
    module, ran, units = proofs
    parts = []
    if module:
        said = [f"{outcome} in `{name}` (vLLM {vllm}{shipped_proofs.runner_said(runner)})"
                for name, vllm, outcome, runner in ran]
        parts.append(f"leave-one-out on a real `vllm serve`: `{module}`; "
                     + ("; ".join(said) if said else "in no serve cell's record yet"))
    if units:
        parts.append("left out and applied on the released file (no server; a lane's interpreter, no record): "
                     + ", ".join(f"`{u}`" for u in units))
    return ". ".join(parts) if parts else "none yet: no leave-one-out test of this patch"


def brief(patch, root: Path = ROOT) -> str:
    """A word or two for the table: serve: passed/failed/skipped/not run, released file, none yet."""
    proofs = found(patch, root)
    if proofs is None:
        return shipped_proofs.brief(patch)
    module, ran, units = proofs
    outcomes = {outcome for _, _, outcome, _ in ran}
    words = [next(f"serve: {o}" for o in ("failed", "passed", "skipped", "not run") if o in outcomes or o == "not run")
             ] if module else []
    return ", ".join(words + (["released file"] if units else [])) or "none yet"
