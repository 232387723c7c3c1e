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

from compat import verdicts
from compat.patcher import EnvironmentProblem, PatchError, Patcher, open_target
from tests.unit import other_user, toy

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


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.frozensets(st.sampled_from(toy.IDS)), st.frozensets(st.sampled_from(toy.IDS)),
       st.frozensets(st.sampled_from(toy.IDS)))
def test_a_plan_reports_per_patch_what_is_on_disk(applied, excluded, wanted):
    """Item 8 as a property: after ``apply --exclude`` of any set, planning any other set says, per patch,
    whether its edits are on disk, even when patches share a file."""
    excluded = excluded & applied
    with tempfile.TemporaryDirectory() as tmp:
        site = toy.make_site(Path(tmp))
        given_decisions = list(verdicts.exclude(toy.decisions(applied), excluded))
        Patcher(open_target("toy", site)).apply(given_decisions, "fp")
        on_disk = applied - excluded
        assert toy.snapshot(site) == toy.expected(on_disk)
        plan = Patcher(open_target("toy", site)).plan(toy.decisions(wanted))
        for pid in toy.IDS:
            decision = plan.decision(pid)
            assert decision.on_disk == ("applied" if pid in on_disk else "excluded" if pid in excluded
                                        else "not applied"), (pid, decision)
            if pid in wanted:
                assert decision.verdict == ("already-applied" if pid in on_disk else "apply"), (pid, decision)


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


# -- all or nothing, permissions, revert without state, links, encodings, immutable decisions -------------------

from dataclasses import FrozenInstanceError  # noqa: E402

from compat.declaration import Edit  # noqa: E402
from compat.registry import Decision  # noqa: E402
from fixtures.synthetic import make_dist  # noqa: E402

SUB_A = b"A = 1\n"
SUB_B = b"B = 1\n"


def _sub_site(root: Path) -> Path:
    """A distribution whose second file sits in a package subdirectory."""
    site = root / "site-packages"
    make_dist(site, "deep", "1.0", {"deep/__init__.py": b"", "deep/a.py": SUB_A, "deep/sub/__init__.py": b"",
                                    "deep/sub/b.py": SUB_B})
    return site


def _deep_decisions():
    return [
        Decision(toy._patch("deep.a", {"deep/a.py": (Edit("A = 1\n", "A = 2\n"),)}), "needed", "", "v"),
        Decision(toy._patch("deep.b", {"deep/sub/b.py": (Edit("B = 1\n", "B = 2\n"),)}), "needed", "", "v"),
    ]


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")
def test_read_only_package_subdirectory_is_refused_before_the_first_write(tmp_path):
    """Item 3: site-packages is writable, deep/sub/ is a read-only mount: nothing may be written, exit 2."""
    site = _sub_site(tmp_path)
    code = (
        "import sys; from pathlib import Path; from tests.unit.test_patcher import _deep_decisions\n"
        "from compat.patcher import EnvironmentProblem, Patcher, open_target\n"
        "try:\n"
        f"    Patcher(open_target('deep', Path({str(site)!r}))).apply(_deep_decisions(), 'fp')\n"
        "except EnvironmentProblem as e:\n"
        "    print(e); sys.exit(2)\n"
    )
    sub = site / "deep" / "sub"
    script = f"mount --bind -o ro {sub} {sub} && exec {sys.executable} -c \"$CODE\""
    proc = subprocess.run(["unshare", "-m", "sh", "-c", script], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "CODE": code})
    if "Operation not permitted" in proc.stderr or "unshare failed" in proc.stderr:
        pytest.skip(f"cannot make a read-only mount here (test_os_error_while_writing_rolls_back covers the "
                    f"same guarantee by injection): {proc.stderr.strip()}")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "deep/sub" in proc.stdout and "Nothing was changed" in proc.stdout
    assert (site / "deep/a.py").read_bytes() == SUB_A  # the writable file was not touched either
    assert (site / "deep/sub/b.py").read_bytes() == SUB_B
    assert not (site / ".specdec-compat" / "deep-1.0").exists()


@pytest.mark.skipif(shutil.which("chattr") is None, reason="needs e2fsprogs chattr")
def test_immutable_file_in_a_subdirectory_is_refused_before_the_first_write(tmp_path):
    """Item 3, without a mount namespace: chattr +i binds root too."""
    site = _sub_site(tmp_path)
    target = site / "deep/sub/b.py"
    made = subprocess.run(["chattr", "+i", str(target)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"this filesystem has no immutable flag: {made.stderr.strip()}")
    try:
        with pytest.raises(EnvironmentProblem, match="deep/sub/b.py is not writable") as info:
            Patcher(open_target("deep", site)).apply(_deep_decisions(), "fp")
        assert info.value.exit_code == 2
        assert (site / "deep/a.py").read_bytes() == SUB_A and target.read_bytes() == SUB_B
        assert not (site / ".specdec-compat" / "deep-1.0").exists()
    finally:
        subprocess.run(["chattr", "-i", str(target)], check=True)


def test_os_error_while_writing_rolls_back_and_is_an_environment_problem(tmp_path, monkeypatch):
    """Item 3: an OSError after the first package file was replaced puts it back; exit 2, nothing changed."""
    import compat.state as state_module  # every write of the patcher goes through it

    site = _sub_site(tmp_path)
    real = state_module.atomic_write

    def failing(path, data, mode=0o644):
        if Path(path).name == "b.py" and "pending" not in Path(path).parts:
            raise OSError(28, "No space left on device")
        return real(path, data, mode)

    monkeypatch.setattr(state_module, "atomic_write", failing)
    with pytest.raises(EnvironmentProblem, match="No space left") as info:
        Patcher(open_target("deep", site)).apply(_deep_decisions(), "fp")
    assert info.value.exit_code == 2
    assert (site / "deep/a.py").read_bytes() == SUB_A
    assert (site / "deep/sub/b.py").read_bytes() == SUB_B
    monkeypatch.setattr(state_module, "atomic_write", real)
    Patcher(open_target("deep", site)).apply(_deep_decisions(), "fp")  # nothing left half-done
    assert (site / "deep/a.py").read_bytes() == b"A = 2\n" and (site / "deep/sub/b.py").read_bytes() == b"B = 2\n"


def test_state_files_are_readable_by_others_and_patched_files_keep_their_mode(tmp_path):
    """Item 4: backups and manifest 0644, directories 0755 (like the site), patched files keep their mode."""
    site = toy.make_site(tmp_path)
    os.chmod(site / "toy/a.py", 0o640)
    os.chmod(site / "toy/b.py", 0o644)  # whatever the umask that made the site
    old_umask = os.umask(0o077)
    try:
        toy.apply(site, {"toy.x", "toy.y"})
    finally:
        os.umask(old_umask)
    state = site / ".specdec-compat" / "toy-1.0"
    for path in [state / "manifest.json", state / "pristine/toy/a.py", state / "pristine/toy/b.py"]:
        assert path.stat().st_mode & 0o777 == 0o644, path
    for path in [site / ".specdec-compat", state, state / "pristine", state / "pristine/toy"]:
        assert path.stat().st_mode & 0o777 == 0o755, path
    assert (site / "toy/a.py").stat().st_mode & 0o777 == 0o640
    assert (site / "toy/b.py").stat().st_mode & 0o777 == 0o644
    toy.revert(site)
    assert (site / "toy/a.py").stat().st_mode & 0o777 == 0o640


def test_unopenable_lock_file_is_an_environment_problem(tmp_path):
    """Item 4: a lock file that cannot be opened is exit 2 with a clear message, not a traceback."""
    site = toy.make_site(tmp_path)
    (site / ".specdec-compat" / ".lock").mkdir(parents=True)  # open() fails: it is a directory
    with pytest.raises(EnvironmentProblem, match="cannot open the lock file"):
        toy.apply(site, {"toy.x"})
    assert toy.snapshot(site) == toy.PRISTINE


def _as_other_user(code: str, site: Path) -> subprocess.CompletedProcess:
    """Run ``code`` as user nobody (root) or as ourselves (we then cannot read a 0600 file of root's anyway)."""
    if os.geteuid() == 0:
        return other_user.run(site.parent, ["-c", code], HOME=str(site.parent))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(site.parent)}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env)


@pytest.fixture
def shared_tmp():
    """A directory another user can read whatever our umask (pytest's tmp_path is 0700)."""
    with tempfile.TemporaryDirectory() as tmp:
        yield Path(tmp)


@pytest.mark.skipif(os.geteuid() == 0 and shutil.which("setpriv") is None, reason="root without setpriv")
def test_another_user_reads_roots_state_and_an_unreadable_manifest_is_not_called_corrupt(shared_tmp):
    """Item 4: after an apply, another user can plan; a manifest they cannot read says so (exit 2), not 'corrupt'."""
    site = toy.make_site(shared_tmp)
    toy.apply(site, {"toy.x"})
    other_user.make_readable(shared_tmp)
    code = (
        "from pathlib import Path; from tests.unit import toy\n"
        "from compat.patcher import EnvironmentProblem, Patcher, open_target\n"
        "try:\n"
        f"    plan = Patcher(open_target('toy', Path({str(site)!r}))).plan(toy.decisions({{'toy.x'}}))\n"
        "    print('verdict', plan.decision('toy.x').verdict)\n"
        "except EnvironmentProblem as e:\n"
        "    print('refused', e.exit_code, e)\n"
    )
    if os.geteuid() == 0:
        readable = _as_other_user(code, site)
        assert readable.stdout.startswith("verdict already-applied"), readable.stdout + readable.stderr
    manifest = site / ".specdec-compat" / "toy-1.0" / "manifest.json"
    os.chmod(manifest, 0o600 if os.geteuid() == 0 else 0o000)
    unreadable = _as_other_user(code, site)
    assert unreadable.stdout.startswith("refused 2 cannot read patcher state"), unreadable.stdout + unreadable.stderr
    assert "corrupt" not in unreadable.stdout


def test_revert_without_state_reports_files_that_differ_from_record(tmp_path):
    """Item 5: no state directory and a patched-looking file: exit 1 with a clear message, nothing restored."""
    site = toy.make_site(tmp_path)
    toy.apply(site, {"toy.x"})
    shutil.rmtree(site / ".specdec-compat" / "toy-1.0")
    before = toy.snapshot(site)
    with pytest.raises(PatchError, match="differ.*RECORD.*no patcher state") as info:
        Patcher(open_target("toy", site)).revert(watched=["toy/a.py", "toy/b.py"])
    assert info.value.exit_code == 1 and "toy/a.py" in str(info.value) and "toy/b.py" not in str(info.value)
    assert toy.snapshot(site) == before


def test_backup_without_a_record_entry_is_never_written_back(tmp_path):
    """Item 5: a file in pristine/ that RECORD does not vouch for is refused, and nothing is restored."""
    site = toy.make_site(tmp_path)
    toy.apply(site, {"toy.x"})
    (site / "toy/extra.py").write_bytes(b"GOOD = 1\n")
    (site / ".specdec-compat/toy-1.0/pristine/toy/extra.py").write_bytes(b"EVIL = 1\n")
    before = toy.snapshot(site)
    with pytest.raises(PatchError, match="no RECORD entry"):
        toy.revert(site)
    assert (site / "toy/extra.py").read_bytes() == b"GOOD = 1\n"
    assert toy.snapshot(site) == before


def test_symlinked_target_is_refused_with_a_clear_verdict_and_the_link_kept(tmp_path):
    """Item 6: replacing a link with a regular file would lose it on revert: refuse, change nothing."""
    site = toy.make_site(tmp_path)
    elsewhere = tmp_path / "store" / "a.py"
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(toy.A)
    (site / "toy/a.py").unlink()
    (site / "toy/a.py").symlink_to(elsewhere)
    ds = {d.patch.id: d for d in toy.apply(site, {"toy.x", "toy.y"})}
    assert ds["toy.x"].verdict == "failed" and "symbolic link" in ds["toy.x"].reason
    assert (site / "toy/a.py").is_symlink() and elsewhere.read_bytes() == toy.A
    assert (site / "toy/b.py").read_bytes() == toy.B  # all or nothing
    dry = Patcher(open_target("toy", site)).plan(toy.decisions({"toy.x"}))
    assert dry.decision("toy.x").verdict == "failed"


NOT_UTF8 = b'"""caf\xe9"""\nX = 1\n'
LATIN1 = b'# -*- coding: latin-1 -*-\n"""caf\xe9"""\nX = 1\n'
CRLF = b'"""crlf"""\r\nX = 1\r\n\r\ndef f():\r\n    return 1\r\n'


def _one_file_site(root: Path, data: bytes) -> Path:
    site = root / "site-packages"
    make_dist(site, "toy", "1.0", {"toy/__init__.py": b"", "toy/a.py": data, "toy/b.py": toy.B})
    return site


def test_non_utf8_file_gets_a_clear_verdict_in_plan_and_apply(tmp_path):
    """Item 6: a file that is not valid UTF-8 (and declares nothing else) is 'failed' with a reason, never a traceback."""
    site = _one_file_site(tmp_path, NOT_UTF8)
    plan = Patcher(open_target("toy", site)).plan(toy.decisions({"toy.x"}))  # the --dry-run path
    assert plan.decision("toy.x").verdict == "failed"
    assert "not valid utf-8" in plan.decision("toy.x").reason
    ds = {d.patch.id: d for d in toy.apply(site, {"toy.x", "toy.y"})}
    assert ds["toy.x"].verdict == "failed"
    assert (site / "toy/a.py").read_bytes() == NOT_UTF8 and (site / "toy/b.py").read_bytes() == toy.B


def test_declared_source_encoding_is_kept(tmp_path):
    """Item 6: a PEP 263 latin-1 file is edited and written back in latin-1."""
    site = _one_file_site(tmp_path, LATIN1)
    ds = {d.patch.id: d for d in toy.apply(site, {"toy.x"})}
    assert ds["toy.x"].verdict == "apply"
    assert (site / "toy/a.py").read_bytes() == LATIN1.replace(b"X = 1\n", b"X = 2\n")
    toy.revert(site)
    assert (site / "toy/a.py").read_bytes() == LATIN1


def test_crlf_file_gets_no_mixed_line_endings(tmp_path):
    """Item 6: multi-line anchors match a CRLF file, and inserted lines get CRLF too."""
    site = _one_file_site(tmp_path, CRLF)
    grow = toy._patch("toy.grow", {"toy/a.py": (Edit('"""crlf"""', '"""crlf"""\nZ = 3'),)})  # one-line anchor, adds a line
    decisions = [*toy.decisions({"toy.x", "toy.f"}), Decision(grow, "needed", "", "v")]
    plan = Patcher(open_target("toy", site)).apply(decisions, "fp")
    assert {d.patch.id: d.verdict for d in plan.decisions if d.verdict != "not-needed"} == {
        "toy.x": "apply", "toy.f": "apply", "toy.grow": "apply"}
    data = (site / "toy/a.py").read_bytes()
    assert data == b'"""crlf"""\r\nZ = 3\r\nX = 2\r\n\r\ndef f():\r\n    return 2  # patched\r\n'
    assert data.count(b"\n") == data.count(b"\r\n")
    assert Patcher(open_target("toy", site)).verify(decisions).problems == ()


def test_decisions_are_immutable_and_planning_returns_new_ones(tmp_path):
    """Small: one life-cycle on frozen decisions: planning never re-marks its input."""
    site = toy.make_site(tmp_path)
    given_decisions = toy.decisions({"toy.x"})
    with pytest.raises(FrozenInstanceError):
        given_decisions[0].verdict = "apply"
    patcher = Patcher(open_target("toy", site))
    first = patcher.plan(given_decisions)
    assert [d.verdict for d in given_decisions] == ["needed", "not-needed", "not-needed"]
    assert first.decision("toy.x").verdict == "apply"
    assert patcher.plan(given_decisions).decisions == first.decisions  # re-planning the same input is the same
