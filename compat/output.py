"""One writer for every command's output: the lines people read or the JSON document on stdout, and ``--json-file``.

Why one: ``apply``, ``plan``, ``surface``, ``catalogue`` and both pipelines of ``confirm`` all take ``--json`` and
``--json-file``, and each had grown its own way to write them (three JSON layouts, one command that checked the file
before it changed anything, others that raised a traceback on an unwritable path).  Here the file is checked when the
options are read, before anything runs or changes (:meth:`Output.checked`), and every document is rendered alike.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from .errors import UsageError
from .exit_policy import ENVIRONMENT


def render(doc: dict) -> str:
    """A document as every command writes it: indented, keys sorted, anything else as its ``str``."""
    return json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n"


def unwritable(path: str | None) -> str | None:
    """Why ``path`` cannot take a JSON document, or None (no file asked for, or one that can be written)."""
    if not path:
        return None
    target = Path(path)
    if target.is_dir():
        return f"--json-file {path} is a directory"
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        return f"--json-file {path}: no directory {parent}"
    if target.exists():
        return None if os.access(target, os.W_OK) else f"--json-file {path} is not writable"
    try:
        fd, probe = tempfile.mkstemp(dir=parent, prefix=".compat-json-probe.")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        return f"--json-file {path}: cannot write in {parent}: {exc.strerror or exc}"
    return None


@dataclass(frozen=True)
class Output:
    """Where a command's result goes: ``json`` prints the document instead of the lines; ``json_file`` also writes
    it there."""

    json: bool = False
    json_file: str | None = None

    @classmethod
    def checked(cls, json: bool = False, json_file: str | None = None) -> "Output":
        """The output a command line asks for; UsageError when ``--json-file`` cannot be written (nothing ran yet)."""
        problem = unwritable(json_file)
        if problem:
            raise UsageError(f"{problem}; nothing was changed")
        return cls(bool(json), json_file or None)

    def write(self, lines: Iterable[str], doc: dict, stderr_prefix: str = "error") -> int | None:
        """Print ``lines`` (or the document with ``json``), then write ``json_file``; None when all went out, else
        ENVIRONMENT after saying why the file could not be written (it went away after the check)."""
        if self.json:
            sys.stdout.write(render(doc))
        else:
            for line in lines:
                print(line)
        sys.stdout.flush()
        return self.write_file(doc, stderr_prefix)

    def write_file(self, doc: dict, stderr_prefix: str = "error") -> int | None:
        """Write only ``json_file`` (a refusal's document); None when written or not asked for, else ENVIRONMENT."""
        if not self.json_file:
            return None
        try:
            Path(self.json_file).write_text(render(doc))
        except OSError as exc:
            print(f"{stderr_prefix}: cannot write {self.json_file}: {exc.strerror or exc}", file=sys.stderr)
            return ENVIRONMENT
        return None
