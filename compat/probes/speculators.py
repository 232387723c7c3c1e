"""Which speculators hidden-state generator is installed.

Judged first by content hash of the pristine files (exact), then by structure
(so a file we patched, or a post-release with the same shape, still resolves).
"""

from __future__ import annotations

import hashlib

from .. import astkit
from ..astkit import Reader
from ..layout import GENERATOR, WORKER
from .base import Reading, Unknown, probe

#: sha256 (hex) of pristine files from the released wheels' RECORD.
KNOWN = {
    "0.3.0": {
        GENERATOR: "514f3f585afa335b558f98c1954a1dc5b804003cd7b08aeeac7c4cd333cd5106",
        WORKER: "e9a95cf6422fa3e3efb3edb658e4898ba23ee141619f58d7096ea7fbde8af548",
    },
    "0.4.x": {
        GENERATOR: "a4c48d8c93526d8a8eef4cba220be209798b71d3b54ee5b347d13e360a2e312e",
        WORKER: "6bc791477d99cc885e9344f47f7a6bcd1f0b1377a453ebb11d368999aa08df1e",
    },
}


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _structure(reader: Reader) -> str | None:
    """0.4.x / 0.3.0 by the worker extension's methods (bases and mixins followed), else None."""
    gen_tree = reader.module(GENERATOR)
    if gen_tree is None or astkit.class_chain(reader, GENERATOR, "VllmHiddenStatesGenerator") is None:
        return None
    ext = astkit.class_chain(reader, WORKER, "HiddenStatesWorkerExtension")
    if ext is None:
        return None
    if ext.method("_set_request_metadata") is not None:
        return "0.4.x"
    if ext.method("_get_captured_states") is not None and ext.complete:
        return "0.3.0"  # only 0.3.0 lacks _set_request_metadata; with an unread base it may be there
    return None


@probe("speculators.generator", package="speculators", values=("absent", *KNOWN))
def speculators_generator(reader: Reader):
    """Installed VllmHiddenStatesGenerator variant: 0.3.0 / 0.4.x / absent."""
    generator, worker = reader.text(GENERATOR), reader.text(WORKER)
    if generator is None and worker is None:
        return Reading("absent", None, None)
    if generator is None or worker is None:
        return Unknown(f"only one of {GENERATOR}, {WORKER} is present")
    hashes = {GENERATOR: _sha(generator), WORKER: _sha(worker)}
    for variant, known in KNOWN.items():
        if known == hashes:
            return Reading(variant, GENERATOR, None)
    variant = _structure(reader)
    if variant is None:
        return Unknown("generator matches no known speculators release by hash or structure")
    return Reading(variant, GENERATOR, None)
