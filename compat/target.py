"""The installed distribution a patch edits, with the RECORD hashes that prove its pristine files."""

from __future__ import annotations

import base64
import importlib.metadata as md
from dataclasses import dataclass
from pathlib import Path

from . import dists
from .errors import EnvironmentProblem
from .layout import STATE_DIR
from .sources import SourceError


@dataclass
class Target:
    """An installed distribution whose files we patch."""

    module: str
    name: str
    version: str
    site: Path
    record: dict[str, str]  # relpath -> sha256 hex from RECORD
    editable: bool

    @property
    def state_root(self) -> Path:
        return self.site / STATE_DIR

    @property
    def state_dir(self) -> Path:
        slug = self.name.lower().replace("-", "_")
        return self.state_root / f"{slug}-{self.version}"

    @property
    def manifest_path(self) -> Path:
        return self.state_dir / "manifest.json"

    def path(self, relpath: str) -> Path:
        return self.site / relpath

    def backup(self, relpath: str) -> Path:
        return self.state_dir / "pristine" / relpath

    def staged(self, relpath: str) -> Path:
        return self.state_dir / "pending" / relpath


def _record_hashes(dist: md.Distribution) -> dict[str, str]:
    out = {}
    for file in dist.files or ():
        if file.hash is not None and file.hash.mode == "sha256":
            raw = base64.urlsafe_b64decode(file.hash.value + "=" * (-len(file.hash.value) % 4))
            out[str(file).replace("\\", "/")] = raw.hex()
    return out


def open_target(module: str, site: str | Path | None = None) -> Target:
    try:
        dist = dists.find_distribution(module, site)
    except SourceError as exc:
        raise EnvironmentProblem(str(exc)) from exc
    if dist is None:
        raise EnvironmentProblem(f"{module} is not installed in this environment (no distribution provides it)")
    info = dists.describe(module, dist)
    return Target(module, info.name, info.version, Path(str(dist.locate_file(""))), _record_hashes(dist), info.editable)
