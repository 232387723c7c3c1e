"""Every command reads its command line into a frozen options value, writes through one writer, and says a usage
problem once; verdicts and exit codes are closed sets.

Expectations come from the commands' own contract (the exit-code table in compat/exit_policy.py's docstring and each
command's --help), run through the real console entry point (``python -m compat.cli``) in a subprocess.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compat import cli, exit_policy
from compat.exit_policy import ExitCode, Finding, Kind
from compat.output import Output, render
from compat.shared.options import ConfirmOptions, resolve_common
from compat.verdicts import Decision, Verdict

ROOT = Path(__file__).resolve().parents[2]


def compat(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "compat.cli", *args], cwd=cwd or ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"})


def _model(tmp_path: Path, **config) -> str:
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"num_hidden_layers": 4, "hidden_size": 8, **config}))
    return str(folder)


@pytest.mark.parametrize("name", cli.COMMANDS)
def test_each_command_reads_its_command_line_into_a_frozen_value(name):
    import importlib

    module = importlib.import_module(cli.COMMAND_MODULES.get(name, f"compat.{name}"))
    options = module.Options
    assert dataclasses.is_dataclass(options) and options.__dataclass_params__.frozen, name
    assert callable(options.from_args)


@pytest.mark.parametrize("argv", [
    ("apply", "--dry-run"),
    ("plan", "--wheel", "."),
    ("surface",),
    ("catalogue",),
    ("confirm", "--model", "."),
], ids=lambda argv: argv[0])
def test_every_command_refuses_an_unwritable_json_file_in_one_line_before_it_runs(argv, tmp_path):
    """One writer checks --json-file for every command when the options are read: exit 2, one line naming the
    file and why, the same words whichever command, and no traceback."""
    target = tmp_path / "no" / "such" / "report.json"
    proc = compat(*argv, "--json-file", str(target), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [f"{argv[0]}: --json-file {target}: no directory {target.parent}; "
                                                f"nothing was changed"], proc.stderr
    assert proc.stdout == "" and not target.parent.exists()


def test_a_usage_problem_is_said_by_the_command_name_once():
    proc = compat("apply", "--force")
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "apply: --force only makes sense with --revert; nothing was changed"], proc.stderr


def test_resolving_confirm_options_makes_a_new_value_and_reads_the_checkpoint_once(tmp_path, monkeypatch):
    from compat import checkpoint

    reads = []
    real = checkpoint.read_config
    monkeypatch.setattr(checkpoint, "read_config", lambda model: reads.append(model) or real(model))
    given = ConfirmOptions.from_args(ConfirmOptions(model=_model(tmp_path, max_position_embeddings=300,
                                                                 text_config={"num_hidden_layers": 6})))
    resolved = resolve_common(given, (11, 33), 64)
    assert (given.sizes, given.max_model_len, given.max_batched_tokens) == (None, None, None)  # untouched
    assert (resolved.sizes, resolved.max_model_len, resolved.max_batched_tokens) == ((11, 33), 300, 64)
    assert given.checkpoint.num_layers == 6  # the text model's value wins (Kimi-K2.5's wrapper)
    assert len(reads) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        given.model = "elsewhere"


def test_a_checkpoint_that_cannot_be_read_says_why_and_gives_no_facts(tmp_path):
    from compat.checkpoint import Checkpoint

    (tmp_path / "config.json").write_text("[1, 2]")
    read = Checkpoint.read(str(tmp_path))
    assert "not a JSON object" in read.unread and read.num_layers is None and read.max_positions is None


def test_verdicts_and_finding_kinds_are_closed_sets():
    from compat.declaration import Patch

    patch = next(iter(__import__("compat.registry", fromlist=["load_patches"]).load_patches()))
    decision = Decision(patch, "needed", "why")
    assert decision.verdict is Verdict.NEEDED and decision.verdict == "needed"
    with pytest.raises(ValueError):
        Decision(patch, "neded", "a typo is no verdict")
    with pytest.raises(ValueError):
        Finding("problme", "a typo is no kind")
    assert Finding("unknown", "x").kind is Kind.UNKNOWN
    assert isinstance(patch, Patch)
    assert json.loads(render({"verdict": decision.verdict, "code": ExitCode.INCOMPLETE})) == {
        "verdict": "needed", "code": 4}
    assert f"{Verdict.ALREADY_APPLIED:18}|" == "already-applied   |"


def test_the_exit_codes_are_the_documented_table():
    table = exit_policy.__doc__
    for code in ExitCode:
        assert str(code) == str(code.value)
        if code not in (ExitCode.INTERRUPTED,):
            assert f"    {code.value} " in table, code
    assert [k.value for k in exit_policy.SEVERITY] == ["environment", "unsupported", "incompatible", "problem",
                                                       "unknown"]
    assert {v.value: c for v, c in exit_policy.VERDICT_CODES.items()} == {"OK": 0, "WRONG": 1, "ERROR": 1,
                                                                          "INCOMPLETE": 4}


def test_the_writer_prints_the_lines_or_the_document_and_writes_the_file(tmp_path, capsys):
    target = tmp_path / "doc.json"
    assert Output(json=False, json_file=str(target)).write(["a line"], {"b": 2, "a": 1}) is None
    assert capsys.readouterr().out == "a line\n" and json.loads(target.read_text()) == {"a": 1, "b": 2}
    assert Output(json=True).write(["not printed"], {"a": 1}) is None
    assert json.loads(capsys.readouterr().out) == {"a": 1}
    gone = tmp_path / "gone"
    gone.mkdir()
    output = Output.checked(json_file=str(gone / "x.json"))
    gone.rmdir()  # the folder went away after the check: said, and the environment's code
    assert output.write([], {}) == ExitCode.ENVIRONMENT
    assert "cannot write" in capsys.readouterr().err


def test_a_serve_confirm_reads_the_checkpoint_once_for_its_spec_identity_and_backend(tmp_path, monkeypatch):
    """The options read config.json; the spec, the report's identity block and the AMX backend choice take it from
    there (a second read could see another file than the run served)."""
    import argparse

    from compat import checkpoint
    from compat.serve import amx_mla, identity
    from compat.serve.options import spec_from_args
    from compat.shared.arguments import add_arguments

    reads = []
    real = checkpoint.read_config
    monkeypatch.setattr(checkpoint, "read_config", lambda model: reads.append(model) or real(model))
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    options = ConfirmOptions.from_args(parser.parse_args(["--path", "serve", "--model", _model(tmp_path),
                                                          "--layers", "1,2,4"]))
    spec = spec_from_args(options, work_dir=tmp_path / "w")
    facts = identity.model_facts(spec.checkpoint)
    amx_mla.reason(spec)
    assert (spec.depth, facts["num_layers"], spec.layer_ids) == (4, 4, [1, 2, 4])
    assert len(reads) == 1, reads
