"""What an installed kit knows of each modern-path (serve) patch's leave-one-out proof: the evidence shipped in the
package (``compat/proof_evidence.py``, generated from the repository's records by ``python -m ci proofs``).

Why only that: the catalogue must not claim a serve patch proven because it is declared, and the wheel carries no
tests or records to read.  ``compat apply``'s "unproven" line reads the same evidence: one answer.  The repository's
fuller view (its proof tests and the serve cells' outcomes) lives in ci.proofs.serve_proofs.
"""

from __future__ import annotations


def shipped(patch) -> list[tuple[str, str, str, str, str]]:
    """Where the records shipped with the kit (compat/proof_evidence.py, ``python -m ci proofs``) say the patch's proof
    passed, each row with its runner (a row naming none ran V1); ``compat apply``'s "unproven" reads the same."""
    from compat.proven import RECORDED_RUNNER, evidence

    return [tuple(row) + (RECORDED_RUNNER,) * (5 - len(row)) for row in evidence(patch.id)]


def runner_said(runner: str) -> str:
    """``, Model Runner V2`` for a record that ran V2, ``, runner unknown`` for one whose runner is not known; '' for
    V1, the runner of every record written before records named theirs (as compat.proven words it)."""
    from compat.probes.runner_v2 import NAMES
    from compat.proven import RECORDED_RUNNER

    return "" if runner == RECORDED_RUNNER else f", {NAMES.get(runner, 'runner unknown')}"


def status(patch) -> str:
    """The proof status in words: the shipped records that prove it, or that none does."""
    rows = shipped(patch)
    if not rows:
        return ("no record shipped with this kit proves it (compat/proof_evidence.py; compat apply says unproven); "
                "the repository's PATCHES.md lists its proof tests")
    return "proven in the records shipped with this kit (compat/proof_evidence.py): " + "; ".join(
        f"vLLM {line} ({device}{runner_said(runner)}), `{record}`" for line, device, _, record, runner in rows)


def brief(patch) -> str:
    """A word or two for the table, as compat apply reads the shipped evidence: serve: passed, or no record."""
    return "serve: passed" if shipped(patch) else "no record"
