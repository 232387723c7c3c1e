"""The two refusals every command turns into an exit code (the code itself is :mod:`compat.exit_policy`'s)."""

from __future__ import annotations

import sys

from .exit_policy import CODES, Finding


class PatchError(Exception):
    """A refusal with a clear message; ``kind`` is the finding it is for the exit-code policy."""

    kind = "problem"

    @property
    def exit_code(self) -> int:
        return CODES[self.kind]

    def finding(self) -> Finding:
        return Finding(self.kind, str(self))


class EnvironmentProblem(PatchError):
    """The environment stops us (missing, editable or read-only install, unreadable state, lock, OSError)."""

    kind = "environment"


class UsageError(EnvironmentProblem):
    """Bad input on a command line (an option, a file it names): raised where it is found, said in one line and turned
    into exit 2 once, by the command's entry point; nothing was run or changed."""


def said(problem: UsageError, command: str) -> int:
    """The one place a usage problem becomes output and an exit code: the command's name, the problem, exit 2."""
    print(f"{command}: {problem}", file=sys.stderr)
    return problem.exit_code
