"""The serve path as a user meets it: the work folder, what is served beyond what was asked, and Ctrl-C.

A newcomer's trial found every run (OK ones included) leaving its ``compat-serve-*`` folder with every hidden-states
file in the temp directory, ``--reference self`` serving ids 1,2,3,4 when 1,2,4 were asked without saying so, and a
Ctrl-C during the server's start ending in a raw ``KeyboardInterrupt`` traceback with the folder left behind.

These tests drive the user's command line (``compat.confirm_command.main``) with the kit's serve runner replaced by a
stand-in that does what the real one does to the folder (the server's ``storage`` and log in it) and returns a
verdict, or is interrupted; the real server's Ctrl-C is tests/contract/serve/test_confirm_ux.py's.  The stop of a
real process group under a Ctrl-C is tested here on a real child process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from compat.confirm_command import main as confirm_main
from compat.serve.runner import ServeResult
from compat.serve.server import Server, deferred_interrupt
from compat.serve.spec import ServeSpec

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 4, "hidden_size": 64,
         "vocab_size": 512, "max_position_embeddings": 2048}


def _model(tmp_path) -> str:
    path = tmp_path / "model"
    path.mkdir()
    (path / "config.json").write_text(json.dumps(LLAMA))
    return str(path)


@pytest.fixture(autouse=True)
def own_tmpdir(tmp_path, monkeypatch):
    """Each test's own temp directory: the folders a run leaves are counted there, not among other runs'."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def _runner(monkeypatch, verdict="OK", interrupt=False):
    """The serve runner's stand-in: makes what the server makes in the folder, then returns ``verdict`` (or raises
    KeyboardInterrupt there, as a Ctrl-C during the server's start does).  The specs it got are returned."""
    import compat.serve.runner as runner

    specs = []

    def run(spec):
        specs.append(spec)
        (spec.work_dir / "storage").mkdir(parents=True)
        (spec.work_dir / "vllm-serve.log").write_text("(Worker pid=1) INFO [gpu_worker.py:518] Using V2 Model Runner\n")
        if interrupt:
            raise KeyboardInterrupt
        checks = {"files": {"ok": verdict == "OK"}}
        return ServeResult(verdict, "" if verdict == "OK" else f"{verdict.lower()} on purpose", checks=checks,
                           log=str(spec.work_dir / "vllm-serve.log"))

    monkeypatch.setattr(runner, "run", run)
    return specs


def _confirm(model, *argv):
    return confirm_main(["--path", "serve", "--model", model, "--layers", "1,2,4", *argv])


def test_an_ok_run_leaves_no_work_folder_and_says_it_removed_it(tmp_path, own_tmpdir, monkeypatch, capsys):
    specs = _runner(monkeypatch)
    report = tmp_path / "r.json"
    assert _confirm(_model(tmp_path), "--json-file", str(report)) == 0
    (spec,) = specs
    assert spec.work_dir.parent == own_tmpdir and not spec.work_dir.exists()
    assert list(own_tmpdir.iterdir()) == []
    assert f"work folder removed: {spec.work_dir}" in capsys.readouterr().out
    doc = json.loads(report.read_text())
    assert doc["work_dir"] == {"path": str(spec.work_dir), "kept": False,
                               "why": "verdict OK; --keep-work-dir keeps it"}
    assert doc["confirmed"]["runner"] == "V2" and doc["confirmed"]["ids_served"] == [1, 2, 4]


@pytest.mark.parametrize("verdict, code", [("WRONG", 1), ("ERROR", 1), ("INCOMPLETE", 4)])
def test_a_run_that_is_not_ok_keeps_its_folder_and_says_where(tmp_path, monkeypatch, capsys, verdict, code):
    specs = _runner(monkeypatch, verdict)
    assert _confirm(_model(tmp_path)) == code
    (spec,) = specs
    out = capsys.readouterr().out
    assert spec.work_dir.is_dir() and f"work folder kept: {spec.work_dir} (verdict {verdict}" in out, out
    assert f"log: {spec.work_dir / 'vllm-serve.log'}" in out


def test_keep_work_dir_keeps_an_ok_runs_folder(tmp_path, monkeypatch, capsys):
    specs = _runner(monkeypatch)
    assert _confirm(_model(tmp_path), "--keep-work-dir") == 0
    (spec,) = specs
    assert spec.work_dir.is_dir() and f"work folder kept: {spec.work_dir} (--keep-work-dir)" in capsys.readouterr().out


def test_keep_work_dir_is_refused_where_it_means_nothing(tmp_path, monkeypatch, capsys):
    specs = _runner(monkeypatch)
    model = _model(tmp_path)
    assert confirm_main(["--path", "generator", "--model", model, "--layers", "0,1", "--keep-work-dir"]) == 2  # the generator path
    assert "--keep-work-dir is the serve path's" in capsys.readouterr().err
    assert _confirm(model, "--files", str(tmp_path), "--keep-work-dir") == 2
    assert "--files DIR starts no server and makes no folder" in capsys.readouterr().err and not specs


def test_reference_self_says_which_ids_it_adds(tmp_path, monkeypatch, capsys):
    specs = _runner(monkeypatch)
    report = tmp_path / "r.json"
    assert _confirm(_model(tmp_path), "--reference", "self", "--json-file", str(report)) == 0
    note = ("note: --reference self also captures ids 3 (k+1 of each asked id, for the one-layer recompute); the "
            "files hold ids 1,2,3,4")
    assert note in capsys.readouterr().out
    assert specs[0].asked_ids == [1, 2, 4] and specs[0].rows == [1, 2, 3, 4]
    confirmed = json.loads(report.read_text())["confirmed"]
    assert (confirmed["ids_asked"], confirmed["ids_served"]) == ([1, 2, 4], [1, 2, 3, 4])


def test_a_reference_that_serves_what_was_asked_says_nothing_of_it(tmp_path, monkeypatch, capsys):
    _runner(monkeypatch)
    assert _confirm(_model(tmp_path)) == 0
    assert "also captures" not in capsys.readouterr().out


def test_ctrl_c_is_one_line_exit_130_and_the_folder_is_gone(tmp_path, own_tmpdir, monkeypatch, capsys):
    specs = _runner(monkeypatch, interrupt=True)
    assert _confirm(_model(tmp_path)) == 130
    (spec,) = specs
    err = capsys.readouterr().err
    assert err.strip() == f"interrupted: stopped the server, removed {spec.work_dir}", err
    assert list(own_tmpdir.iterdir()) == []


def test_ctrl_c_with_keep_work_dir_keeps_it(tmp_path, monkeypatch, capsys):
    specs = _runner(monkeypatch, interrupt=True)
    assert _confirm(_model(tmp_path), "--keep-work-dir") == 130
    assert specs[0].work_dir.is_dir()
    assert capsys.readouterr().err.strip().endswith(f"kept {specs[0].work_dir} (--keep-work-dir)")


def _sigint_me_in(seconds: float) -> threading.Timer:
    timer = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    return timer


def test_a_ctrl_c_inside_the_held_block_is_raised_after_it():
    done = []
    with pytest.raises(KeyboardInterrupt):
        with deferred_interrupt():
            _sigint_me_in(0.1)
            time.sleep(0.6)
            done.append(True)  # the block ran whole
    assert done and signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_ctrl_c_during_stop_still_stops_the_whole_group(tmp_path):
    """A server that ignores SIGTERM (one slow to shut down): the Ctrl-C arrives while stop() waits; the group is
    still killed, then the Ctrl-C is raised.  Without the hold, the wait was cut and the server left running."""
    spec = ServeSpec(model=_model(tmp_path), work_dir=tmp_path / "w", calls=[[[5, 6]]], layer_ids=[1, 2])
    server = Server(spec)
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    server.proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True)
    assert server.proc.stdout.readline() == b"up\n"  # its SIGTERM handler is in place
    _sigint_me_in(0.3)
    with pytest.raises(KeyboardInterrupt):
        server.stop(grace_s=1.5)
    assert server.proc.poll() == -signal.SIGKILL
