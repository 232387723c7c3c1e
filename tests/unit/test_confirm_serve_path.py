"""``compat confirm --path serve``: every confirm option reaches the server (or the check) it configures, or is
refused with exit 2 and the reason; nothing is dropped.

Each test drives the user's command line (``compat.confirm_command.main``) with the serve runner replaced by a
recorder, and asserts on the ``ServeSpec`` it would run and on ``vllm serve``'s command line built from it.  The
expected values are the options given, and vLLM's own flag names (``vllm serve --help``: --max-model-len,
--tensor-parallel-size, --pipeline-parallel-size, --gpu-memory-utilization, --max-num-batched-tokens).
At b4d4a2d the serve path forwarded only model, dtype, layers and --json-file: each of these fails there.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compat.confirm_command import main as confirm_main
from compat.serve import server as serve_server
from compat.serve.runner import ServeResult

LOG = Path(__file__).parent / "data" / "vllm032_serve_max_model_len.log"


def _model(tmp_path, limit=2048, layers=4, name="m"):
    path = tmp_path / name
    path.mkdir(exist_ok=True)
    (path / "config.json").write_text(json.dumps({
        "model_type": "llama", "num_hidden_layers": layers, "hidden_size": 64, "vocab_size": 512,
        "max_position_embeddings": limit}))
    return str(path)


@pytest.fixture
def ran(monkeypatch):
    """The specs the serve runner was handed (none: refused before running)."""
    import compat.serve.__main__ as serve_main
    import compat.serve.runner as runner

    specs = []

    def record(spec):
        specs.append(spec)
        return ServeResult("OK", "", checks={"files": {"ok": True}}, log="server.log")

    monkeypatch.setattr(runner, "run", record)
    monkeypatch.setattr(serve_main, "run", record, raising=False)  # b4d4a2d's __main__ imported it by name
    return specs


def _confirm(model, *argv):
    return confirm_main(["--path", "serve", "--model", model, "--layers", "1,2,3,4", *argv])


def _command(spec, tmp_path):
    return serve_server.command(spec, 1234, tmp_path / "storage")


def _flag(argv, name):
    return argv[argv.index(name) + 1]


def test_without_path_the_installed_speculators_picks_the_pipeline():
    """No default pipeline in the parser: the installed speculators decides (tests/unit/test_pipelines.py)."""
    import argparse

    from compat.shared.arguments import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert parser.parse_args(["--model", "m"]).path is None


def test_max_model_len_reaches_the_server_and_the_prompts_fit(tmp_path, ran):
    assert _confirm(_model(tmp_path), "--max-model-len", "100") == 0
    (spec,) = ran
    assert spec.max_model_len == 100 and _flag(_command(spec, tmp_path), "--max-model-len") == "100"
    assert max(len(p) for call in spec.calls for p in call) <= 99  # the prompt and its one generated token


def test_max_model_len_defaults_to_the_models_own_limit_when_under_512(tmp_path, ran):
    assert _confirm(_model(tmp_path, limit=256)) == 0
    assert _confirm(_model(tmp_path, limit=4096, name="big")) == 0
    short, long = ran
    assert short.max_model_len == 256 and max(len(p) for c in short.calls for p in c) <= 255
    assert long.max_model_len == 512


def test_the_generator_path_takes_the_same_default(tmp_path):
    from compat.confirm.cli import spec_from_args
    from compat.shared.arguments import add_arguments
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    from compat.shared.options import ConfirmOptions

    spec = spec_from_args(ConfirmOptions.from_args(parser.parse_args(["--model", _model(tmp_path, limit=300),
                                                                      "--layers", "0,1"])))
    assert spec.engine["max_model_len"] == 300 and max(len(p) for c in spec.calls for p in c) <= 299


@pytest.mark.parametrize("option,flag", [("--tensor-parallel-size", "--tensor-parallel-size"),
                                         ("--pipeline-parallel-size", "--pipeline-parallel-size")])
def test_parallel_sizes_reach_the_server_and_the_report(tmp_path, ran, option, flag, capsys):
    report = tmp_path / "r.json"
    assert _confirm(_model(tmp_path), option, "2", "--json-file", str(report)) == 0
    (spec,) = ran
    assert _flag(_command(spec, tmp_path), flag) == "2"
    assert json.loads(report.read_text())["options"][flag[2:].replace("-", "_")] == 2


def test_gpu_memory_utilization_and_budget_reach_the_server(tmp_path, ran):
    assert _confirm(_model(tmp_path), "--gpu-memory-utilization", "0.07", "--max-batched-tokens", "48") == 0
    (spec,) = ran
    argv = _command(spec, tmp_path)
    assert _flag(argv, "--gpu-memory-utilization") == "0.07" and _flag(argv, "--max-num-batched-tokens") == "48"
    # the long prompt of the last call is 3x the budget: chunked prefill really happens
    assert max(len(p) for p in spec.calls[-1]) == 3 * 48 + 8


def test_rtol_replaces_the_row_bounds(tmp_path, ran):
    from compat.serve.runner import row_tolerance

    assert _confirm(_model(tmp_path), "--rtol", "0.05") == 0
    (spec,) = ran
    assert row_tolerance(spec).rtol == 0.05 and row_tolerance(spec, "twin").rtol == 0.05


def test_calls_and_prompts_shape_the_client_runs(tmp_path, ran):
    prompts = tmp_path / "p.txt"
    prompts.write_text("1 2 3\n[7, 8]\n9 10 11 12\n")
    assert _confirm(_model(tmp_path), "--calls", "2,5,3") == 0
    assert _confirm(_model(tmp_path), "--calls", "2,3", "--prompts", str(prompts)) == 0
    generated, given = ran
    assert [len(c) for c in generated.calls] == [2, 5, 3]
    assert given.calls == [[[1, 2, 3], [7, 8]], [[9, 10, 11, 12], [1, 2, 3], [7, 8]]]


@pytest.mark.parametrize("reference,hf,logprobs,twin,recompute", [("hf", True, True, False, False),
                                                                   ("self", False, True, True, True),
                                                                   ("none", False, False, False, False)])
def test_reference_picks_the_checks(tmp_path, ran, reference, hf, logprobs, twin, recompute):
    assert _confirm(_model(tmp_path), "--reference", reference) == 0
    (spec,) = ran
    assert (spec.hf_check, spec.logprobs_check, spec.twin_check, spec.recompute_check) == \
        (hf, logprobs, twin, recompute)


def test_reference_self_captures_each_id_and_the_next(tmp_path, ran):
    assert confirm_main(["--path", "serve", "--model", _model(tmp_path, layers=8), "--layers", "2,5,8",
                         "--reference", "self"]) == 0
    assert ran[0].layer_ids == [2, 3, 5, 6, 8]


def test_json_prints_the_document(tmp_path, ran, capsys):
    assert _confirm(_model(tmp_path), "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == "OK" and doc["options"]["max_model_len"] == 512


def test_log_puts_the_servers_log_there(tmp_path, ran):
    log = tmp_path / "logs" / "serve.log"
    assert _confirm(_model(tmp_path), "--log", str(log)) == 0
    assert serve_server.Server(ran[0]).log == log


def test_trust_remote_code_reaches_the_server(tmp_path, ran):
    assert _confirm(_model(tmp_path), "--trust-remote-code") == 0
    assert "--trust-remote-code" in _command(ran[0], tmp_path)


@pytest.mark.parametrize("argv,reason", [
    (["--reference", "vllm-extract"], "--reference vllm-extract is the generator path's"),
    (["--verbose"], "--verbose is the generator path's"),
    (["--tensor-parallel-size", "0"], "--tensor-parallel-size must be >= 1"),
    (["--max-model-len", "1"], "leaves no room"),
    (["--max-batched-tokens", "0"], "--max-batched-tokens must be >= 1"),
    (["--rtol", "0"], "--rtol must be > 0"),
    (["--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization must lie in (0, 1]"),
    (["--calls", "3,x"], "--calls wants positive sequence counts"),
])
def test_what_cannot_apply_is_refused_with_exit_2_and_the_reason(tmp_path, ran, capsys, argv, reason):
    assert _confirm(_model(tmp_path), *argv) == 2
    assert reason in capsys.readouterr().err and not ran


def test_a_prompt_over_max_model_len_is_refused(tmp_path, ran, capsys):
    prompts = tmp_path / "p.txt"
    prompts.write_text(" ".join(["5"] * 40) + "\n")
    assert _confirm(_model(tmp_path), "--prompts", str(prompts), "--max-model-len", "32") == 2
    assert "more than --max-model-len allows" in capsys.readouterr().err and not ran


def test_reference_self_is_refused_on_the_generator_path(tmp_path, capsys):
    assert confirm_main(["--path", "generator", "--model", _model(tmp_path), "--layers", "0,1", "--reference", "self"]) == 2
    assert "--reference self is the serve path's" in capsys.readouterr().err


def test_a_dead_server_error_names_the_cause_first(tmp_path):
    from compat.serve.server import Server, ServerError
    from compat.serve.spec import ServeSpec

    spec = ServeSpec(model=_model(tmp_path), work_dir=tmp_path / "w", calls=[[[5, 6]]], layer_ids=[1, 2],
                     python="/bin/sh", start_timeout_s=30)
    server = Server(spec)
    server.spec = spec
    import compat.serve.server as module

    real = module.command
    module.command = lambda *_: ["/bin/sh", "-c", f"cat {LOG}; exit 1"]
    try:
        with pytest.raises(ServerError) as exc:
            server.__enter__()
    finally:
        module.command = real
    first = str(exc.value).splitlines()[0]
    assert first.startswith("User-specified max_model_len (512) is greater than the derived"), first


def test_files_is_the_serve_paths_and_wants_a_folder(tmp_path, ran, capsys):
    model = _model(tmp_path)
    assert confirm_main(["--path", "generator", "--model", model, "--layers", "0,1", "--files", str(tmp_path)]) == 2
    assert "--files is the serve path's" in capsys.readouterr().err
    assert _confirm(model, "--files", str(tmp_path / "absent")) == 2
    assert "not a folder" in capsys.readouterr().err and not ran
    assert _confirm(model, "--files", str(tmp_path)) == 2  # a folder without hs_<n>.safetensors
    assert "no hs_<n>.safetensors" in capsys.readouterr().err and not ran
