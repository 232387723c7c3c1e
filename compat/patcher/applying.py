"""Apply: from a plan that nothing blocks, the manifest's next state and the writes, then one journaled run."""

from __future__ import annotations

from ..state import Manifest
from ..target import Target
from . import journal
from .disk import sha256
from .planning import Plan


def apply_plan(target: Target, manifest: Manifest, plan: Plan, fingerprint: str) -> Plan:
    """Write what ``plan`` composed (all or nothing); a blocked plan writes nothing.  Returns it with ``written``."""
    if plan.blocked:
        return plan  # nothing written; the report carries the reasons
    files = {}
    for relpath, state in plan.files.items():
        if state.patches:
            files[relpath] = {
                "pristine_sha256": sha256(state.pristine),
                "patched_sha256": sha256(state.desired),
                "known_sha256": sorted(manifest.known(relpath) | {sha256(state.desired)}),
                "patches": state.patches,
            }
    excluded = [d.patch.id for d in plan.decisions if d.verdict == "excluded"]
    next_state = manifest.next_state(files, excluded, fingerprint)
    writes = {rel: (s.current, s.wanted) for rel, s in plan.files.items()
              if s.wanted is not None and s.current != s.wanted and (s.patches or rel in manifest.files)}
    journal.run(target, manifest, "apply", writes, {rel: plan.files[rel].pristine for rel in writes}, next_state)
    return Plan(plan.decisions, plan.files, stale=plan.stale, written=tuple(sorted(writes)))
