"""A ``compat confirm`` report file as ``--check`` reads it, before it knows which pipeline wrote it.

Both pipelines write a JSON report; ``compat confirm --check REPORT`` reads it once, tells an old-path report (a
``confirmed`` block tied to the installed surface by its fingerprint) from a serve report (the runner's ``checks``
and ``verdict``, gated on itself), and hands it to that pipeline's gate.
"""

from __future__ import annotations

import json
from pathlib import Path


class ReportError(ValueError):
    """A report --check cannot read."""


def load_json(path: str):
    """The report file's JSON; ReportError where it cannot be read or parsed."""
    try:
        return json.loads(Path(path).read_text())
    except OSError as exc:
        raise ReportError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ReportError(f"{path} is not JSON: {exc}") from None


def is_serve_report(doc) -> bool:
    """A ``compat confirm --path serve`` document: the runner's ``checks`` and ``verdict``, no surface fingerprint
    (the old path's reports have neither ``checks`` nor a ``confirmed`` block without one)."""
    if not isinstance(doc, dict) or "checks" not in doc or "verdict" not in doc:
        return False
    block = doc.get("confirmed")
    return not (isinstance(block, dict) and "fingerprint" in block)
