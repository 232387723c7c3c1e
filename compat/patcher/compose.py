"""Edit application: the needed patches' anchored edits, composed in registry order on a file's pristine text."""

from __future__ import annotations

from typing import Sequence

from ..declaration import AnchorError
from ..verdicts import Decision


def compose(text: str, decisions: Sequence[Decision], relpath: str) -> tuple[str, dict[str, str]]:
    """Apply, in registry order, every decision's edits for ``relpath`` to pristine ``text``.

    Returns the composed text and ``{patch id: error}`` for edits whose anchor
    did not match exactly once, or for a result that does not compile.
    """
    errors: dict[str, str] = {}
    touching = [d for d in decisions if relpath in d.patch.files(d.variant)]
    for decision in touching:
        for edit in decision.patch.edits[decision.variant][relpath]:
            try:
                text = edit.apply(text, f"{decision.patch.id} {relpath}")
            except AnchorError as exc:
                errors.setdefault(decision.patch.id, str(exc))
    try:
        compile(text, relpath, "exec", dont_inherit=True)
    except SyntaxError as exc:
        for decision in touching:
            errors.setdefault(decision.patch.id, f"{relpath} does not compile after patching: {exc}")
    return text, errors
