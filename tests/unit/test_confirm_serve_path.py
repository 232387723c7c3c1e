"""``compat confirm --path serve`` is the serve path's confirm (compat.serve) with confirm's own options."""

from __future__ import annotations

import argparse

from compat.confirm.cli import add_arguments, serve_argv


def _args(*argv):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_the_generator_path_is_the_default():
    assert _args("--model", "m").path == "generator"


def test_serve_gets_model_dtype_layers_and_report():
    args = _args("--path", "serve", "--model", "/ckpt", "--dtype", "bfloat16", "--layers", "2,30,58,61",
                 "--json-file", "out.json")
    assert serve_argv(args) == ["--model", "/ckpt", "--dtype", "bfloat16", "--layers", "2,30,58,61",
                                "--json-file", "out.json"]


def test_serve_keeps_speculators_default_ids_when_no_layers_are_given():
    assert "--layers" not in serve_argv(_args("--path", "serve", "--model", "/ckpt"))


def test_a_bad_path_is_a_usage_error():
    import pytest

    with pytest.raises(SystemExit) as exc:
        _args("--path", "sglang", "--model", "m")
    assert exc.value.code == 2
