"""``compat confirm --path serve --serve-arg ARG``: the user's own ``vllm serve`` flags reach the server the confirm
starts, after the kit's and the plan's, and the report says them; what the kit itself must own (the address its
client reaches, the extraction and connector configs) and every path that starts no server refuse it with exit 2.
The expectations are vLLM's command line (argparse: a later flag wins) and the kit's own refusal contract."""

from __future__ import annotations

import argparse
import json

import pytest

from compat.confirm import cli as confirm_cli
from compat.errors import UsageError
from compat.shared.arguments import add_arguments
from compat.serve import options, server
from compat.serve.plan import Rule

EAGER = Rule("FLAGS", "vllm serve ... --enforce-eager: compiled start-up dies here", args=("--enforce-eager",))


def refused(call) -> int:
    """A usage problem raised where it is found, and the exit code the command line turns it into (said once)."""
    with pytest.raises(UsageError) as raised:
        call()
    from compat.errors import said

    return said(raised.value, "confirm")


def _args(tmp_path, *more: str, path: str = "serve", layers: str = "1,2,3,4"):
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps({"num_hidden_layers": 4, "hidden_size": 8}))
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    from compat.shared.options import ConfirmOptions

    return ConfirmOptions.from_args(parser.parse_args(["--path", path, "--model", str(model), "--layers", layers,
                                                       *more]))


def test_serve_args_reach_the_command_line_after_the_plans(tmp_path):
    args = _args(tmp_path, "--serve-arg=--no-enable-extensible-kv-cache", "--serve-arg=--max-num-seqs=8")
    spec = options.spec_from_args(args, work_dir=tmp_path / "w", flags=[EAGER])
    argv = server.command(spec, 8000, tmp_path / "storage")
    assert argv[-3:] == ["--enforce-eager", "--no-enable-extensible-kv-cache", "--max-num-seqs=8"]
    assert options.options_of(spec, args, [EAGER])["serve_args"] == [
        "--no-enable-extensible-kv-cache", "--max-num-seqs=8"]


def test_a_serve_arg_that_turns_chunked_prefill_off_sizes_the_budget_as_the_plans_flag_does(tmp_path):
    spec = options.spec_from_args(_args(tmp_path, "--max-model-len", "300", "--serve-arg=--no-enable-chunked-prefill"),
                                  work_dir=tmp_path / "w")
    argv = server.command(spec, 8000, tmp_path / "storage")
    assert not spec.enable_chunked_prefill and argv.count("--no-enable-chunked-prefill") == 1
    assert "--enable-chunked-prefill" not in argv and argv[argv.index("--max-num-batched-tokens") + 1] == "300"


@pytest.mark.parametrize("arg", ["--port=9000", "--kv-transfer-config={}", "--speculative_config={}", "--host"])
def test_what_the_kit_owns_is_refused_with_exit_2(tmp_path, arg, capsys):
    assert refused(lambda: options.spec_from_args(_args(tmp_path, f"--serve-arg={arg}"), work_dir=tmp_path / "w")) == 2
    assert "the kit sets" in capsys.readouterr().err


def test_a_bare_value_is_refused_with_exit_2(tmp_path, capsys):
    assert refused(lambda: options.spec_from_args(_args(tmp_path, "--serve-arg=8"), work_dir=tmp_path / "w")) == 2
    assert "not an option" in capsys.readouterr().err


def test_the_generator_path_refuses_it_with_exit_2(tmp_path, capsys):
    args = _args(tmp_path, "--serve-arg=--enforce-eager", path="generator", layers="1,2")
    assert refused(lambda: confirm_cli.spec_from_args(args)) == 2
    assert "--serve-arg is the serve path's" in capsys.readouterr().err


def test_files_refuses_it_with_exit_2(tmp_path, capsys):
    files = tmp_path / "files"
    files.mkdir()
    args = _args(tmp_path, "--serve-arg=--enforce-eager", "--files", str(files))
    assert refused(lambda: options.confirm_serve(args, work_dir=tmp_path / "w")) == 2
    assert "--files DIR starts no server" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()  # refused before any folder or server
