"""A cache of probe results for installed packages, valid while the files they read are unchanged.

Parsing vLLM's largest modules dominates a dry run.  An entry records every
file the probes of one package read, with its size and mtime, and every
environment variable they read (``VLLM_USE_V2_MODEL_RUNNER``); it is used
only if all of them are still the same (a missing file must still be missing,
an unset variable still unset) and the probe code itself is unchanged.  Any
doubt (corrupt, unreadable) means evaluating again.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from .layout import cache_root

_CODE = Path(__file__).resolve().parent


def _cache_dir() -> Path:
    return cache_root() / "probe-cache"


def _code_hash() -> str:
    digest = hashlib.sha256()
    for path in sorted([*_CODE.glob("probes/*.py"), *_CODE.glob("serve/probes/*.py"), _CODE / "astkit.py"]):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


class Recording:
    """Wraps a Source and remembers every file a probe asked for, with its stat at the moment it was read.

    The cache keeps an entry only while those stats hold; ``fixtures.synthetic`` copies just the asked
    files out of a wheel (where a stat is ``None``: no file on disk).  ``environ`` is the environment the
    source's code runs in (``os.environ`` for an installed package, read by :class:`compat.astkit.Reader`),
    recorded the same way; left ``None`` (a wheel, sdist or tree) the probes see no environment.
    """

    def __init__(self, source, environ=None):
        self.source, self.seen = source, {}
        self.environ = None if environ is None else _RecordingEnviron(environ)

    def read(self, relpath):
        self.seen[relpath] = _stat(Path(self.source.location) / relpath)
        return self.source.read(relpath)


class _RecordingEnviron:
    """A read-only view of an environment that remembers every variable asked for."""

    def __init__(self, environ):
        self._environ, self.seen = environ, {}

    def get(self, name, default=None):
        value = self._environ.get(name)
        self.seen[name] = value
        return default if value is None else value

    def __contains__(self, name):
        return self.get(name) is not None

    def __getitem__(self, name):
        value = self.get(name)
        if value is None:
            raise KeyError(name)
        return value


def _stat(path: Path):
    try:
        st = path.stat()
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def _entry_path(package: str, source) -> Path:
    key = hashlib.sha256(f"{_code_hash()}|{package}|{source.location}|{source.version}".encode()).hexdigest()[:24]
    return _cache_dir() / f"{package}-{key}.json"


def load(package: str, source):
    """(values, where) if a valid entry exists, else None."""
    try:
        data = json.loads(_entry_path(package, source).read_text())
        base = Path(source.location)
        same_files = all(_stat(base / rel) == stat for rel, stat in data["files"].items())
        same_env = all(os.environ.get(name) == value for name, value in data["environ"].items())
        if same_files and same_env:
            return data["values"], data["where"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def store(package: str, source, recording: Recording, values: dict, where: dict) -> None:
    try:
        path = _entry_path(package, source)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({
            "files": recording.seen, "environ": recording.environ.seen, "values": values, "where": where,
        }))
        os.replace(tmp, path)
    except (OSError, TypeError, ValueError):
        pass  # a cache that cannot be written is only slower
