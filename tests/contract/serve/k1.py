"""Put K1 (``vllm.serve.cpu_connector``) on or off the lane's installed vLLM, with the kit's real patcher.

The decision comes from the registry over the installed vLLM's surface, so the
proof exercises the declaration, its probe and the patcher as ``compat apply``
would; "off" is the patcher's byte-exact revert to the RECORD-proven pristine file.
"""

from __future__ import annotations

PATCH_ID = "vllm.serve.cpu_connector"


def decision():
    """(K1's surface-level decision on the installed vLLM, the surface)."""
    from compat import registry, surface
    from compat.sources import InstalledSource

    patch = next(p for p in registry.load_patches("serve") if p.id == PATCH_ID)
    located = surface.dists.locate("vllm")
    surf = surface.evaluate(InstalledSource(located.dist, located.base), None, only="vllm")
    return registry.judge(patch, surf), surf


def set_applied(applied: bool) -> str:
    """K1 on (True) or off (False); returns the connector file's path."""
    from compat.patcher import Patcher, open_target

    made, surf = decision()
    if made.verdict != "needed":
        raise AssertionError(f"K1 is {made.verdict} on this vLLM: {made.reason}")
    patcher = Patcher(open_target("vllm"))
    if applied:
        plan = patcher.apply([made], surf.fingerprint())
        if plan.blocked:
            raise AssertionError(f"K1 not applied: {[(d.verdict, d.reason) for d in plan.decisions]}")
    else:
        patcher.revert()
    return str(patcher.target.path(made.patch.files(made.variant)[0]))


def is_applied() -> bool:
    """K1's edits are in the installed connector."""
    from compat.patcher import open_target

    made, _ = decision()
    files = made.patch.files(made.variant) if made.variant in made.patch.edits else ()
    return bool(files) and f"specdec-compat {PATCH_ID}" in open_target("vllm").path(files[0]).read_text()
