"""Where source files come from: an installed dist, a wheel, an sdist or a tree.

Probes only ever call :meth:`Source.read`, so the same probe code judges an
installed vLLM, a wheel that is not installed yet, or a git checkout.
"""

from __future__ import annotations

import email.parser
import importlib.metadata as md
import io
import re
import tarfile
import zipfile
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: a checkout's pyproject.toml stays unread, so its version is unknown
    tomllib = None


class SourceError(Exception):
    """A source that cannot be opened (missing file, not an archive...)."""


class Source:
    """A read-only view of a package's files, addressed by import-relative path."""

    def __init__(self, kind: str, location: str, dist_name: str | None, version: str | None,
                 metadata: str | None = None, unread: str | None = None):
        self.kind = kind  # installed | wheel | sdist | tree
        self.location = location
        self.dist_name = dist_name
        self.version = version
        self.metadata = metadata  # the core metadata text (METADATA / PKG-INFO) the version came from, if any
        self.unread = unread  # why ``version`` is None: what was looked for and not found (never a default)

    def read(self, relpath: str) -> str | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def read_bytes(self, relpath: str) -> bytes | None:  # pragma: no cover - abstract
        """A file's raw bytes (a compiled extension), or None if the source has no such file."""
        raise NotImplementedError

    def names(self, prefix: str, suffix: str) -> list[str]:
        """Relative paths of this source's files under ``prefix`` ending in ``suffix`` (for the compiled ones)."""
        return []

    def open_bytes(self, relpath: str) -> io.RawIOBase | None:
        """A seekable binary stream of a file (an ELF reader seeks in it), or None if the source has no such file."""
        data = self.read_bytes(relpath)
        return None if data is None else io.BytesIO(data)


def _decode_metadata(raw: bytes, where: str) -> str:
    """Core metadata as text; it is UTF-8 by specification, and anything else is a clear error, not a traceback."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SourceError(f"{where} is not valid UTF-8 at byte {exc.start} (core metadata must be UTF-8); "
                          f"cannot read its name and version") from None


def _metadata_version(text: str) -> tuple[str | None, str | None]:
    msg = email.parser.Parser().parsestr(text, headersonly=True)
    return msg.get("Name"), msg.get("Version")


def provides(dist: md.Distribution, module: str) -> bool:
    """Does this dist-info provide top-level ``module``? (top_level.txt, else its RECORD, searched as text)."""
    top = dist.read_text("top_level.txt")
    if top is not None and module in top.split():
        return True
    return re.search(rf"^{re.escape(module)}(?:/|\.[^/,]*,)", dist.read_text("RECORD") or "", re.M) is not None


def tree_metadata(root: Path, module: str) -> tuple[str | None, str | None, str | None, str | None]:
    """(name, version, metadata text, why unread) of the project whose ``module`` lies under ``root``.

    Looked for in this order: ``PKG-INFO`` (an unpacked sdist), the dist-info
    that provides ``module`` (an unpacked wheel, a site-packages folder), the
    static ``[project] version`` of ``pyproject.toml`` (a checkout).  A version
    that is none of these is unknown: a checkout whose version setuptools-scm
    computes from git has no version until it is built.
    """
    pkg_info = root / "PKG-INFO"
    if pkg_info.is_file():
        text = _decode_metadata(pkg_info.read_bytes(), str(pkg_info))
        name, version = _metadata_version(text)
        if version:
            return name, version, text, None
    owners = [d for d in md.distributions(path=[str(root)]) if provides(d, module)]
    if len(owners) > 1:
        found = ", ".join(sorted(f"{d.metadata['Name']} {d.version}" for d in owners))
        return None, None, None, f"{len(owners)} dist-infos in {root} provide {module} ({found})"
    if owners:
        text = owners[0].read_text("METADATA") or ""
        name, version = _metadata_version(text)
        if version:
            return name, version, text, None
    project = _pyproject(root / "pyproject.toml")
    if project.get("version"):
        return project.get("name"), str(project["version"]), None, None
    dynamic = " (its version is dynamic, computed at build time)" if "version" in project.get("dynamic", ()) else ""
    return project.get("name"), None, None, (
        f"no version readable for {module} in {root}: no PKG-INFO, no dist-info providing {module}, "
        f"no static version in pyproject.toml{dynamic}")


def _pyproject(path: Path) -> dict:
    if tomllib is None:
        return {}
    try:
        project = tomllib.loads(path.read_text(encoding="utf-8")).get("project", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}
    return project if isinstance(project, dict) else {}


class _FolderSource(Source):
    """Files under a folder (``location``), by relative path: an installed copy and a tree read alike."""

    def __init__(self, kind: str, base: Path, dist_name: str | None, version: str | None,
                 metadata: str | None = None, unread: str | None = None):
        super().__init__(kind, str(base), dist_name, version, metadata, unread)
        self._base = base

    def read(self, relpath: str) -> str | None:
        try:
            return (self._base / relpath).read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def read_bytes(self, relpath: str) -> bytes | None:
        return _file_bytes(self._base / relpath)

    def open_bytes(self, relpath: str) -> io.RawIOBase | None:
        try:
            return open(self._base / relpath, "rb")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def names(self, prefix: str, suffix: str) -> list[str]:
        return _tree_names(self._base, prefix, suffix)


class InstalledSource(_FolderSource):
    """An installed distribution's files, read from ``base``: where the imported copy lives.

    ``base`` comes from :func:`compat.dists.locate` (an editable install's
    package lives in its project, not beside the dist-info); it defaults to the
    dist-info's directory.
    """

    def __init__(self, dist: md.Distribution, base: str | Path | None = None):
        base = Path(str(dist.locate_file(""))) if base is None else Path(base)
        super().__init__("installed", base, dist.metadata["Name"], dist.version)


class WheelSource(Source):
    def __init__(self, path: str | Path):
        path = Path(path)
        try:
            archive = zipfile.ZipFile(path)
        except (OSError, zipfile.BadZipFile) as exc:
            raise SourceError(f"cannot open wheel {path}: {exc}") from exc
        names = set(archive.namelist())
        meta = next((n for n in names if n.count("/") == 1 and n.endswith(".dist-info/METADATA")), None)
        text = _decode_metadata(archive.read(meta), f"{path}:{meta}") if meta else None
        name, version = _metadata_version(text) if text else (None, None)
        super().__init__("wheel", str(path), name, version, text,
                         None if version else f"{path} has no dist-info METADATA with a Version")
        self._zip = archive
        self._names = names

    def read(self, relpath: str) -> str | None:
        if relpath not in self._names:
            return None
        return self._zip.read(relpath).decode("utf-8")

    def read_bytes(self, relpath: str) -> bytes | None:
        return self._zip.read(relpath) if relpath in self._names else None

    def open_bytes(self, relpath: str) -> io.RawIOBase | None:
        if relpath not in self._names:
            return None
        return InflatedPrefix(self._zip.open(relpath), self._zip.getinfo(relpath).file_size)

    def names(self, prefix: str, suffix: str) -> list[str]:
        return sorted(n for n in self._names if n.startswith(prefix) and n.endswith(suffix))


class InflatedPrefix(io.RawIOBase):
    """A compressed zip member as a seekable stream that inflates only up to the furthest byte read.

    Why: a wheel's compiled extension is 40-110 MB deflated, and the ELF data the plan needs (program headers,
    the dynamic section, the version needs) lies in its first third; ``zipfile``'s own seek inflates to the end
    for ``SEEK_END`` and from the start again for every backward seek.  Bytes already inflated are kept.
    """

    def __init__(self, member, size: int):
        super().__init__()
        self._member, self._size, self._data, self._pos = member, size, bytearray(), 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._pos = max(0, offset + {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence])
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, size: int | None = -1) -> bytes:
        end = self._size if size is None or size < 0 else min(self._pos + size, self._size)
        while end > len(self._data):  # in steps of 1 MiB: zipfile's one huge read costs half as much again
            chunk = self._member.read(1 << 20)
            if not chunk:
                break
            self._data += chunk
        out = bytes(self._data[self._pos:end])
        self._pos += len(out)
        return out

    def close(self) -> None:
        self._member.close()
        self._data = bytearray()
        super().close()


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
        name, version, text = None, None, None
        if pkg_info is not None:
            text = _decode_metadata(archive.extractfile(pkg_info).read(), f"{path}:{pkg_info.name}")
            name, version = _metadata_version(text)
        super().__init__("sdist", str(path), name, version, text,
                         None if version else f"{path} has no PKG-INFO with a Version")
        self._tar = archive
        self._members = members
        self._root = root

    def read(self, relpath: str) -> str | None:
        data = self.read_bytes(relpath)
        return None if data is None else data.decode("utf-8")

    def read_bytes(self, relpath: str) -> bytes | None:
        prefix = f"{self._root}/" if self._root else ""
        member = self._members.get(f"{prefix}{relpath}") or self._members.get(f"{prefix}src/{relpath}")  # src/ layout
        return None if member is None else self._tar.extractfile(member).read()

    def names(self, prefix: str, suffix: str) -> list[str]:
        root = f"{self._root}/" if self._root else ""
        found = set()
        for name in self._members:
            for base in (root, f"{root}src/"):
                rel = name[len(base):] if name.startswith(base) else None
                if rel and rel.startswith(prefix) and rel.endswith(suffix):
                    found.add(rel)
        return sorted(found)


class TreeSource(_FolderSource):
    """A source checkout, an unpacked archive or a site-packages folder: ``<root>/<module>/...``, or the
    ``src/`` layout of a checkout or unpacked sdist (``<root>/src/<module>/...``; files outside the package, such as
    ``scripts/``, stay read from ``<root>``)."""

    def __init__(self, path: str | Path, dist_name: str | None = None, version: str | None = None,
                 module: str = "vllm"):
        path = Path(path)
        if not path.is_dir():
            raise SourceError(f"not a directory: {path}")
        text = unread = None
        if version is None:
            dist_name, version, text, unread = tree_metadata(path, module)
        super().__init__("tree", path, dist_name, version, text, unread)

    def read(self, relpath: str) -> str | None:
        text = super().read(relpath)
        return text if text is not None else super().read(f"src/{relpath}")

    def read_bytes(self, relpath: str) -> bytes | None:
        data = super().read_bytes(relpath)
        return data if data is not None else super().read_bytes(f"src/{relpath}")

    def names(self, prefix: str, suffix: str) -> list[str]:
        inside = [n[len("src/"):] for n in super().names(f"src/{prefix}", suffix)]
        return sorted(set(super().names(prefix, suffix)) | set(inside))


def _file_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None


def _tree_names(base: Path, prefix: str, suffix: str) -> list[str]:
    folder = base / prefix
    return sorted(str(p.relative_to(base)) for p in folder.rglob(f"*{suffix}")) if folder.is_dir() else []


def open_source(path: str | Path, module: str = "vllm") -> Source:
    """Pick the backend from what ``path`` is; a tree's version is the one of the project providing ``module``."""
    path = Path(path)
    if path.is_dir():
        return TreeSource(path, module=module)
    if path.suffix == ".whl":
        return WheelSource(path)
    if path.name.endswith((".tar.gz", ".tgz", ".tar")):
        return SdistSource(path)
    raise SourceError(f"not a wheel, sdist or directory: {path}")
