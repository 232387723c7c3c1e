"""PATCHES.md: the patch catalogue with the repository's view of each serve proof, written or checked.

    python -m ci catalogue            # rewrite PATCHES.md from patches/ and the repository's proofs
    python -m ci catalogue --check    # exit 1 if the committed PATCHES.md is not what they give

Why here and not in the kit: the page names the repository's proof tests, the serve cells' outcomes and the saved
halves of each proof (``docs/records/self-reference/<lane>/``), none of which an installed kit has.  ``compat
catalogue`` renders the same declarations with the evidence shipped in the package (compat.catalogue.SHIPPED).
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

from compat import catalogue
from ci import generated
from ci.proofs import serve_proofs

ROOT = serve_proofs.ROOT
PAGE = ROOT / "PATCHES.md"
COMMAND = "python -m ci catalogue"
#: where a serve proof's own halves are saved, per lane (``python -m ci readme --take LANE``; the serve table of
#: docs/modern-path.md)
SAVED = Path("docs/records/self-reference")
#: the verdicts each half of a leave-one-out proof expects: the bug shows left out, the rows are right applied
EXPECTED = {"left-out": ("WRONG", "ERROR"), "applied": ("OK",)}


def saved_pairs(patch, root: Path = ROOT) -> list[dict]:
    """The serve proof's saved halves (``<lane>/kN-left-out.json`` and ``kN-applied.json``), one entry per lane that
    holds either: ``{lane, vllm, met, missing, commit, tree, verdicts}`` (``met``: both halves saved, each as the proof
    expects).

    Why: docs/modern-path.md's serve table quotes these records, so the catalogue must say the same of each proof."""
    key = serve_proofs.module_key(patch)
    out = []
    for folder in sorted(p for p in (root / SAVED).glob("*") if p.is_dir()) if key else []:
        halves = {}
        for part in EXPECTED:
            path = folder / f"{key}-{part}.json"
            if path.is_file():
                halves[part] = json.loads(path.read_text())
        if not halves:
            continue
        verdicts = {part: halves[part].get("verdict") if part in halves else None for part in EXPECTED}
        commits = {str(doc.get("commit") or "")[:10] for doc in halves.values()}
        out.append({"lane": folder.name, "vllm": (next(iter(halves.values())).get("versions") or {}).get("vllm"),
                    "met": all(verdicts[part] in EXPECTED[part] for part in EXPECTED),
                    "missing": [part for part in EXPECTED if part not in halves],
                    "commit": ", ".join(sorted(c for c in commits if c)) or None,
                    "tree": "modified" if any(doc.get("tree") == "modified" for doc in halves.values()) else "clean",
                    "verdicts": verdicts})
    return out


def brief(patch, root: Path = ROOT) -> str:
    """The table's proof column before what ``compat plan`` counts: the serve cells' outcome, then each saved pair."""
    words = [serve_proofs.brief(patch, root)]
    for pair in saved_pairs(patch, root):
        said = "passed" if pair["met"] else f"{' and '.join(pair['missing'])} half missing" if pair["missing"] \
            else "not as expected"
        words.append(f"saved pair {said} in {pair['lane']}")
    return "; ".join(words)


def status(patch, root: Path = ROOT) -> str:
    """The **Proof.** paragraph before what ``compat plan`` counts: the cells' records, then each saved pair."""
    said = [serve_proofs.status(patch, root)]
    for pair in saved_pairs(patch, root):
        verdicts = {part: verdict or "not saved" for part, verdict in pair["verdicts"].items()}
        said.append(f"saved pair in `{SAVED.as_posix()}/{pair['lane']}/` (vLLM {pair['vllm']}): left out "
                    f"{verdicts['left-out']}, applied {verdicts['applied']}, "
                    f"{'as the proof expects' if pair['met'] else '**not** a whole proof'} (commit "
                    f"{pair['commit'] or 'none'}, {pair['tree']} tree)")
    return ". ".join(said)


def view(root: Path = ROOT) -> catalogue.ProofView:
    """The repository's proof view of the catalogue: proof tests, serve records and saved pairs under ``root``."""
    return catalogue.ProofView(
        brief=partial(brief, root=root), status=partial(status, root=root), saved=partial(saved_pairs, root=root),
        generated_by=f"`{COMMAND}`",
        proof_source="the proof column is read from the repository: `tests/contract/serve/test_kN_proof.py` (a "
                     "leave-one-out proof on a real `vllm serve`, for `patches/serve/kN_*.py`) with its outcome in "
                     "the serve cells' records (`docs/coverage/records`), and `tests/unit/test_serve_patch_proofs.py` "
                     "(the released file left out and applied).")


def render(root: Path = ROOT) -> str:
    """PATCHES.md as the repository's proofs say it."""
    return catalogue.render(view(root))


def write(check: bool = False, root: Path = ROOT) -> int:
    """Write PATCHES.md (0), or with ``check`` say whether it is current (0) or stale (1)."""
    return generated.write(root / PAGE.name, render(root), check, COMMAND)
