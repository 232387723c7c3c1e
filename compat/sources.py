"""Where source files come from: an installed dist, a wheel, an sdist or a tree.

Probes only ever call :meth:`Source.read`, so the same probe code judges an
installed vLLM, a wheel that is not installed yet, or a git checkout.
"""

from __future__ import annotations

import email.parser
import importlib.metadata as md
import tarfile
import zipfile
from pathlib import Path


class SourceError(Exception):
    """A source that cannot be opened (missing file, not an archive...)."""


class Source:
    """A read-only view of a package's files, addressed by import-relative path."""

    def __init__(self, kind: str, location: str, dist_name: str | None, version: str | None):
        self.kind = kind  # installed | wheel | sdist | tree
        self.location = location
        self.dist_name = dist_name
        self.version = version

    def read(self, relpath: str) -> str | None:  # pragma: no cover - abstract
        raise NotImplementedError


def _metadata_version(raw: bytes, where: str) -> tuple[str | None, str | None]:
    try:
        text = raw.decode("utf-8")  # core metadata is UTF-8 by specification
    except UnicodeDecodeError as exc:
        raise SourceError(f"{where} is not valid UTF-8 at byte {exc.start} (core metadata must be UTF-8); "
                          f"cannot read its name and version") from None
    msg = email.parser.Parser().parsestr(text, headersonly=True)
    return msg.get("Name"), msg.get("Version")


class InstalledSource(Source):
    """An installed distribution's files, read from ``base``: where the imported copy lives.

    ``base`` comes from :func:`compat.dists.locate` (an editable install's
    package lives in its project, not beside the dist-info); it defaults to the
    dist-info's directory.
    """

    def __init__(self, dist: md.Distribution, base: str | Path | None = None):
        base = Path(str(dist.locate_file(""))) if base is None else Path(base)
        super().__init__("installed", str(base), dist.metadata["Name"], dist.version)
        self._base = base

    def read(self, relpath: str) -> str | None:
        path = self._base / relpath
        try:
            return path.read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None


class WheelSource(Source):
    def __init__(self, path: str | Path):
        path = Path(path)
        try:
            archive = zipfile.ZipFile(path)
        except (OSError, zipfile.BadZipFile) as exc:
            raise SourceError(f"cannot open wheel {path}: {exc}") from exc
        names = set(archive.namelist())
        meta = next((n for n in names if n.count("/") == 1 and n.endswith(".dist-info/METADATA")), None)
        name, version = _metadata_version(archive.read(meta), f"{path}:{meta}") if meta else (None, None)
        super().__init__("wheel", str(path), name, version)
        self._zip = archive
        self._names = names

    def read(self, relpath: str) -> str | None:
        if relpath not in self._names:
            return None
        return self._zip.read(relpath).decode("utf-8")


class SdistSource(Source):
    def __init__(self, path: str | Path):
        path = Path(path)
        try:
            archive = tarfile.open(path)
            members = {m.name: m for m in archive.getmembers() if m.isfile()}
        except (OSError, tarfile.TarError) as exc:
            raise SourceError(f"cannot open sdist {path}: {exc}") from exc
        roots = {n.split("/", 1)[0] for n in members}
        root = roots.pop() if len(roots) == 1 else ""
        pkg_info = members.get(f"{root}/PKG-INFO")
        name, version = (None, None)
        if pkg_info is not None:
            name, version = _metadata_version(archive.extractfile(pkg_info).read(), f"{path}:{pkg_info.name}")
        super().__init__("sdist", str(path), name, version)
        self._tar = archive
        self._members = members
        self._root = root

    def read(self, relpath: str) -> str | None:
        member = self._members.get(f"{self._root}/{relpath}" if self._root else relpath)
        if member is None:
            return None
        return self._tar.extractfile(member).read().decode("utf-8")


class TreeSource(Source):
    """A source checkout or an unpacked archive: ``<root>/vllm/...``."""

    def __init__(self, path: str | Path, dist_name: str | None = None, version: str | None = None):
        path = Path(path)
        if not path.is_dir():
            raise SourceError(f"not a directory: {path}")
        if version is None:
            for meta in [path / "PKG-INFO", *path.glob("vllm*.dist-info/METADATA")]:
                if meta.is_file():
                    dist_name, version = _metadata_version(meta.read_bytes(), str(meta))
                    break
        super().__init__("tree", str(path), dist_name, version)
        self._base = path

    def read(self, relpath: str) -> str | None:
        try:
            return (self._base / relpath).read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None


def open_source(path: str | Path) -> Source:
    """Pick the backend from what ``path`` is."""
    path = Path(path)
    if path.is_dir():
        return TreeSource(path)
    if path.suffix == ".whl":
        return WheelSource(path)
    if path.name.endswith((".tar.gz", ".tgz", ".tar")):
        return SdistSource(path)
    raise SourceError(f"not a wheel, sdist or directory: {path}")
