"""The two refusals every command maps to an exit code (see :mod:`compat.report`)."""

from __future__ import annotations

from .report import ENVIRONMENT, PATCH_PROBLEM


class PatchError(Exception):
    """A refusal with a clear message; ``exit_code`` follows the CLI's contract."""

    exit_code = PATCH_PROBLEM


class EnvironmentProblem(PatchError):
    """The environment stops us (missing, editable or read-only install, unreadable state, lock, OSError)."""

    exit_code = ENVIRONMENT
