"""The exit-code policy: what a command found -> the word it prints and the code it exits with.

One table for every command, so ``apply``, ``--dry-run``, ``--verify``,
``--revert``, ``plan``, ``surface`` and ``confirm --check`` cannot disagree on
what a finding means (before this module, six places decided it, and
``--dry-run`` on an editable install said 1 where ``apply`` said 2)::

    0    OK / YES        everything needed is (or would be) applied and verified
    1    PROBLEM / NO /  a needed patch failed, a file drifted, a needed patch is not on disk,
         UNKNOWN         a probe a patch depends on is unknown, --verify found a problem;
                         NO: the plan's answer for the install is NO (no patch rescues the combination:
                         ``compat plan``'s rules), and ``apply``, ``--dry-run`` and ``--verify`` give that
                         same NO and code (apply and --dry-run stop before anything is written)
    2    ERROR           an environment or usage problem (package missing, editable or read-only
                         install, ambiguous copies, unreadable or corrupt state, lock, any OSError,
                         bad arguments); a refusal changes nothing
    3    UNSUPPORTED     nothing to patch: this speculators has no generator the kit knows
    4    INCOMPLETE      (compat confirm) nothing differed, but a part could not run or was not looked at
    141  (no word)       the reader of stdout went away (``| head``), as for a command killed by SIGPIPE

Callers name what they found as :class:`Finding` s of a kind; the most
severe kind decides.  The words differ per mode (``plan`` answers YES / NO),
the codes never do.
"""

from __future__ import annotations

import os
import select
import signal
import sys
from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import Callable, Iterable, Sequence

# the policy sits below every layer: any command may ask it, it imports none of them (a decision is any object with
# compat.verdicts.Decision's ``verdict``, ``patch`` and ``reason``: read by duck typing, so no import circle)
Decision = object



class Word(str, Enum):
    """A closed set of words a command prints and compares: each member is its own string (what JSON, a report file
    and a comparison with a bare string see), so a typo in a producer fails at once instead of passing as a new
    word.  (``enum.StrEnum`` from Python 3.11; the kit runs on 3.10 too.)"""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class ExitCode(IntEnum):
    """Every exit code a command of the kit returns (the table in this module's docstring)."""

    OK = 0
    PATCH_PROBLEM = 1
    ENVIRONMENT = 2
    UNSUPPORTED = 3
    #: compat confirm only: nothing differed, but a part could not run or was not looked at enough (named)
    INCOMPLETE = 4
    #: a Ctrl-C: 128 + SIGINT, as a shell reports it
    INTERRUPTED = 128 + int(signal.SIGINT)
    #: the reader of stdout went away (``| head``), as for a command killed by SIGPIPE
    BROKEN_PIPE = 128 + int(signal.SIGPIPE)

    def __str__(self) -> str:  # the number, as a shell shows it, on every Python (3.10 gives the name)
        return str(self.value)


OK, PATCH_PROBLEM, ENVIRONMENT, UNSUPPORTED = ExitCode.OK, ExitCode.PATCH_PROBLEM, ExitCode.ENVIRONMENT, ExitCode.UNSUPPORTED
INCOMPLETE, INTERRUPTED, BROKEN_PIPE = ExitCode.INCOMPLETE, ExitCode.INTERRUPTED, ExitCode.BROKEN_PIPE


class ConfirmVerdict(Word):
    """compat confirm's verdicts, either pipeline's, a run's and --check's alike."""

    OK = "OK"
    WRONG = "WRONG"
    ERROR = "ERROR"
    INCOMPLETE = "INCOMPLETE"


#: each confirm verdict's exit code
VERDICT_CODES = {ConfirmVerdict.OK: OK, ConfirmVerdict.WRONG: PATCH_PROBLEM, ConfirmVerdict.ERROR: PATCH_PROBLEM,
                 ConfirmVerdict.INCOMPLETE: INCOMPLETE}


class Kind(Word):
    """Kinds of finding, most severe first (the order of the members): the first one present decides."""

    ENVIRONMENT = "environment"
    UNSUPPORTED = "unsupported"
    INCOMPATIBLE = "incompatible"
    PROBLEM = "problem"
    UNKNOWN = "unknown"


SEVERITY = tuple(Kind)
CODES = {None: OK, Kind.ENVIRONMENT: ENVIRONMENT, Kind.UNSUPPORTED: UNSUPPORTED, Kind.INCOMPATIBLE: PATCH_PROBLEM,
         Kind.PROBLEM: PATCH_PROBLEM, Kind.UNKNOWN: PATCH_PROBLEM}
_COMMAND_WORDS = {None: "OK", Kind.ENVIRONMENT: "ERROR", Kind.UNSUPPORTED: "UNSUPPORTED", Kind.INCOMPATIBLE: "NO",
                  Kind.PROBLEM: "PROBLEM", Kind.UNKNOWN: "UNKNOWN"}
#: The words each mode prints; ``plan`` answers the question "can I install this?".
WORDS = {
    "plan": {**_COMMAND_WORDS, None: "YES", Kind.INCOMPATIBLE: "NO", Kind.PROBLEM: "NO"},
}
#: Verdicts a decision may be left in that make the run a problem (apply then writes nothing).
PROBLEM_VERDICTS = {"failed": "problem", "drifted": "problem", "needed": "problem", "unknown-surface": "unknown"}


@dataclass(frozen=True)
class Finding:
    """One thing a command found that bears on its exit code."""

    kind: Kind  # a Kind's string is taken too, and made the Kind
    text: str

    def __post_init__(self):
        try:
            object.__setattr__(self, "kind", Kind(self.kind))
        except ValueError:
            raise ValueError(f"unknown finding kind {self.kind!r} (one of {', '.join(SEVERITY)})") from None


@dataclass(frozen=True)
class Outcome:
    mode: str
    word: str
    code: ExitCode
    findings: tuple[Finding, ...]


def decision_findings(mode: str, decisions: Iterable[Decision]) -> list[Finding]:
    """The findings a set of decisions carries.  ``plan`` stops at the surface step, so ``needed`` is its YES."""
    found = []
    for d in decisions:
        kind = PROBLEM_VERDICTS.get(d.verdict)
        if kind and not (mode == "plan" and d.verdict == "needed"):
            found.append(Finding(kind, f"{d.patch.id}: {d.verdict} ({d.reason})"))
    return found


def decide(mode: str, decisions: Sequence[Decision] = (), problems: Iterable[Finding | str] = ()) -> Outcome:
    """The word and the exit code of ``mode`` given its decisions and problems (a bare string is a problem)."""
    findings = decision_findings(mode, decisions)
    findings += [p if isinstance(p, Finding) else Finding("problem", p) for p in problems]
    kinds = {f.kind for f in findings}
    worst = next((k for k in SEVERITY if k in kinds), None)
    return Outcome(mode, WORDS.get(mode, _COMMAND_WORDS)[worst], CODES[worst], tuple(findings))


def code_of_word(mode: str, word: str) -> int:
    """The exit code of an answer already put into words (``plan``'s YES / NO / UNKNOWN / UNSUPPORTED)."""
    words = WORDS.get(mode, _COMMAND_WORDS)
    kind = next((k for k, w in words.items() if w == word), "missing")
    if kind == "missing":
        raise ValueError(f"{mode} has no answer {word!r} (one of {', '.join(sorted(set(words.values())))})")
    return CODES[kind]


def run(handler: Callable[..., int], *args) -> int:
    """Run a command; a closed stdout (``compat surface | head``) ends it quietly with :data:`BROKEN_PIPE`.

    stdout is pointed at /dev/null first, so the interpreter's final flush
    cannot raise the same error again at exit.
    """
    try:
        code = handler(*args)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        if not _stdout_reader_gone():
            raise  # some other pipe: a real error, not the reader of our output leaving
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return BROKEN_PIPE


def _stdout_reader_gone() -> bool:
    """True when stdout is a pipe whose reading end is closed (poll reports POLLERR on the write end)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(event & (select.POLLERR | select.POLLHUP) for _, event in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return False
