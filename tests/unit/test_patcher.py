"""The patcher on a synthetic distribution: idempotence, exact revert, refusals."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from filelock import FileLock
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compat.patcher import EnvironmentProblem, Patcher, open_target
from tests.unit import toy

ROOT = Path(__file__).resolve().parents[2]

operations = st.lists(
    st.one_of(st.just("revert"), st.frozensets(st.sampled_from(toy.IDS))), min_size=1, max_size=8
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations)
def test_any_sequence_of_apply_and_revert_is_exact(ops):
    with tempfile.TemporaryDirectory() as tmp:
        site = toy.make_site(Path(tmp))
        for op in ops:
            if op == "revert":
                toy.revert(site)
                assert toy.snapshot(site) == toy.PRISTINE
                assert not (site / ".specdec-compat" / "toy-1.0").exists()
            else:
                first = toy.apply(site, op)
                assert toy.snapshot(site) == toy.expected(op)
                again = toy.apply(site, op)  # idempotent: second apply changes nothing
                assert toy.snapshot(site) == toy.expected(op)
                assert {d.verdict for d in again if d.patch.id in op} <= {"already-applied"}
                assert {d.verdict for d in first if d.patch.id in op} <= {"apply", "already-applied"}
        toy.revert(site)
        assert toy.snapshot(site) == toy.PRISTINE


def test_apply_writes_manifest_and_clears_bytecode(tmp_path):
    site = toy.make_site(tmp_path)
    cache = site / "toy" / "__pycache__"
    cache.mkdir()
    (cache / "a.cpython-311.pyc").write_bytes(b"stale")
    toy.apply(site, {"toy.x", "toy.y"})
    assert not (cache / "a.cpython-311.pyc").exists()
    manifest = json.loads((site / ".specdec-compat" / "toy-1.0" / "manifest.json").read_text())
    assert manifest["files"]["toy/a.py"]["patches"] == ["toy.x"]
    assert manifest["surface_fingerprint"] == "fp"
    assert (site / ".specdec-compat" / "toy-1.0" / "pristine" / "toy" / "a.py").read_bytes() == toy.A


def test_changing_the_needed_set_starts_from_pristine(tmp_path):
    site = toy.make_site(tmp_path)
    toy.apply(site, {"toy.x", "toy.f"})
    toy.apply(site, {"toy.f"})  # e.g. after a vLLM upgrade toy.x is no longer needed
    assert toy.snapshot(site) == toy.expected({"toy.f"})
    toy.apply(site, set())
    assert toy.snapshot(site) == toy.PRISTINE


def test_drifted_file_is_refused_and_nothing_changes(tmp_path):
    site = toy.make_site(tmp_path)
    (site / "toy/a.py").write_bytes(toy.A + b"# local edit\n")
    before = toy.snapshot(site)
    ds = toy.apply(site, {"toy.x", "toy.y"})
    verdicts = {d.patch.id: d.verdict for d in ds}
    assert verdicts["toy.x"] == "drifted"
    assert "RECORD" in next(d.reason for d in ds if d.patch.id == "toy.x")
    assert toy.snapshot(site) == before  # toy.y was not applied either: all or nothing
    assert not (site / ".specdec-compat" / "toy-1.0" / "manifest.json").exists()


def test_file_changed_after_patching_is_drifted(tmp_path):
    site = toy.make_site(tmp_path)
    toy.apply(site, {"toy.x"})
    (site / "toy/a.py").write_bytes(b"X = 99\n")
    ds = toy.apply(site, {"toy.x"})
    assert next(d.verdict for d in ds if d.patch.id == "toy.x") == "drifted"
    assert (site / "toy/a.py").read_bytes() == b"X = 99\n"
    with pytest.raises(Exception, match="changed by something other"):
        toy.revert(site)
    toy.revert(site, force=True)
    assert toy.snapshot(site) == toy.PRISTINE


def test_anchor_that_no_longer_matches_fails_cleanly(tmp_path):
    site = toy.make_site(tmp_path, )
    from compat.declaration import Edit
    from compat.registry import Decision

    bad = toy._patch("toy.bad", {"toy/a.py": (Edit("NOT THERE", "x"),)})
    ds = Patcher(open_target("toy", site)).apply([Decision(bad, "needed", "", "v"), *toy.decisions({"toy.y"})], "fp").decisions
    assert ds[0].verdict == "failed" and "matches 0 times" in ds[0].reason
    assert toy.snapshot(site) == toy.PRISTINE


def test_editable_install_is_refused(tmp_path):
    site = toy.make_site(tmp_path, editable=True)
    with pytest.raises(EnvironmentProblem, match="editable"):
        toy.apply(site, {"toy.x"})
    assert toy.snapshot(site) == toy.PRISTINE
    assert not (site / ".specdec-compat").exists()


def test_corrupt_manifest_is_refused_and_nothing_changes(tmp_path):
    site = toy.make_site(tmp_path)
    toy.apply(site, {"toy.x"})
    manifest = site / ".specdec-compat" / "toy-1.0" / "manifest.json"
    manifest.write_text("{not json")
    before = toy.snapshot(site)
    with pytest.raises(EnvironmentProblem, match="corrupt manifest"):
        toy.apply(site, {"toy.x", "toy.y"})
    assert toy.snapshot(site) == before
    assert manifest.read_text() == "{not json"
    with pytest.raises(Exception, match="--force"):
        toy.revert(site)  # without the manifest it cannot tell our bytes from a drift
    assert toy.snapshot(site) == before
    toy.revert(site, force=True)  # the RECORD-proven backups still restore pristine
    assert toy.snapshot(site) == toy.PRISTINE


def test_missing_package_is_an_environment_problem(tmp_path):
    site = toy.make_site(tmp_path)
    with pytest.raises(EnvironmentProblem, match="not installed"):
        open_target("nothere", site)


def test_held_lock_is_refused_with_nothing_changed(tmp_path):
    site = toy.make_site(tmp_path)
    (site / ".specdec-compat").mkdir()
    with FileLock(str(site / ".specdec-compat" / ".lock")):
        with pytest.raises(EnvironmentProblem, match="another apply"):
            toy.apply(site, {"toy.x"}, lock_timeout=0.2)
    assert toy.snapshot(site) == toy.PRISTINE


def _run(site: Path, selected: str, extra_env=None) -> subprocess.Popen:
    code = (
        "import sys; from pathlib import Path; from tests.unit import toy;"
        f"toy.apply(Path({str(site)!r}), set({selected!r}.split(',')) - {{''}})"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(extra_env or {})}
    return subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_eight_concurrent_applies_give_one_correct_result(tmp_path):
    site = toy.make_site(tmp_path)
    procs = [_run(site, "toy.x,toy.f,toy.y") for _ in range(8)]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
    assert toy.snapshot(site) == toy.expected(set(toy.IDS))
    leftovers = [p for p in site.rglob("*.tmp")]
    assert leftovers == []
    manifest = json.loads((site / ".specdec-compat" / "toy-1.0" / "manifest.json").read_text())
    assert manifest["patches"] == sorted(toy.IDS)


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")
def test_read_only_site_packages_is_refused(tmp_path):
    site = toy.make_site(tmp_path)
    script = (
        f"mount --bind -o ro {site} {site} && "
        f"{sys.executable} -c 'import sys; from pathlib import Path; from tests.unit import toy; "
        f"from compat.patcher import EnvironmentProblem\n"
        f"try:\n toy.apply(Path(\"{site}\"), {{\"toy.x\"}})\n"
        f"except EnvironmentProblem as e:\n print(e); sys.exit(2)'"
    )
    proc = subprocess.run(["unshare", "-m", "sh", "-c", script], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    if "Operation not permitted" in proc.stderr or "unshare failed" in proc.stderr:
        pytest.skip(f"cannot make a read-only mount here: {proc.stderr.strip()}")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "read-only" in proc.stdout
    assert toy.snapshot(site) == toy.PRISTINE
