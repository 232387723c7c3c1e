"""The root cause of a failed vLLM run, read from its log (or a captured stderr).

vLLM runs in several processes (the API server or the calling process, the engine core, its workers), and each one
that fails prints a traceback.  The process that started the failure prints first; the others fail because it did,
and their tracebacks end in a line that only points back at it: "See root cause above", "Worker failed with error
'...'", ``EngineDeadError``.  So the cause is the *first* exception line that is not such a consequence.  Not the
last: after the engine died, the parent may raise an error of its own about it (a missing file, a reply that never
came), and that is a symptom.  Lines vLLM logged below ERROR (a warning about a handled exception, say) are not
the failure and are never the cause.  Where the log holds only consequences (a process killed by a signal, or
stopped on purpose, prints no traceback of its own) the first of them is returned, marked ``consequence``: it says
that something died, not why.

Each line loses vLLM's logger prefix ("ERROR 12-02 05:52:38 [file.py:962] "); its process tag ("(Worker pid=8988)
") is kept apart, in ``Cause.process``: a server's error line starts with the cause itself, a report names the
process too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: the tag vLLM puts before each line of a child process: "(EngineCore_DP0 pid=4242) ", "(Worker pid=8988) "
PROCESS_TAG = re.compile(r"^\((?P<process>[^()]*\bpid=\d+)\)\s?")
#: vLLM's logger prefix: "ERROR 12-02 05:52:38 [multiproc_executor.py:962] "
LOGGER_PREFIX = re.compile(r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? "
                           r"\[[^\]]*\] ?")
#: levels at which vLLM logs what it got past, not what ended it
QUIET_LEVELS = ("DEBUG", "INFO", "WARNING")
#: the line a traceback ends with: "[pkg.mod.]SomeError: message"; an empty message goes on over the next lines
EXCEPTION_LINE = re.compile(r"^(?P<type>(?:[A-Za-z_]\w*\.)*(?:[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Died)"
                            r"|Exception)):(?: (?P<message>.*))?$")
#: how many lines an exception's message may go on over, when its first line holds none
CONTINUATION_LINES = 3
#: what vLLM raises because another process failed: the cause only when nothing else was raised
CONSEQUENCES = ("See root cause above", "Engine core initialization failed", "Engine process failed to start",
                "See stack trace (above) for the root cause", "Worker failed with error", "EngineDeadError",
                "WorkerProc initialization failed", "worker died", "Worker failed")
#: pydantic's header, "1 validation error for ModelConfig": the reason, vLLM's own check, is on a following line
PYDANTIC_HEADER = re.compile(r"^\d+ validation errors? for \w+")
PYDANTIC_REASONS = ("Value error, ", "Assertion failed, ")
PYDANTIC_REASON_WITHIN = 5
MESSAGE_LIMIT = 2000


@dataclass(frozen=True)
class Cause:
    """What went wrong (``message``: the exception line, or pydantic's reason) and the process that said it."""

    process: str | None  # "EngineCore_DP0 pid=4242"; None where the line had no tag
    message: str
    #: the log held only consequences: this one says a process died, not why (a shutdown's EngineDeadError, say)
    consequence: bool = False

    def __str__(self) -> str:
        return f"({self.process}) {self.message}" if self.process else self.message


@dataclass(frozen=True)
class _Line:
    process: str | None
    level: str | None
    text: str


def _read(line: str) -> _Line:
    """One line of the log, its process tag and logger prefix taken off."""
    text, process, level = line.strip(), None, None
    if tag := PROCESS_TAG.match(text):
        process, text = tag.group("process"), text[tag.end():]
    if prefix := LOGGER_PREFIX.match(text):
        level, text = prefix.group("level"), text[prefix.end():]
    return _Line(process, level, text.strip())


def _message(lines: list[_Line], at: int) -> str | None:
    """The exception that ends at ``lines[at]``, as one line; None where that line is no exception."""
    line = lines[at]
    found = EXCEPTION_LINE.match(line.text)
    if not found or line.level in QUIET_LEVELS:
        return None
    if not found.group("message"):  # the message starts on the next line (multiprocessing's bootstrapping error)
        more = []
        for after in lines[at + 1:at + 1 + CONTINUATION_LINES]:
            if not after.text or after.process != line.process or after.text.startswith("Traceback") \
                    or EXCEPTION_LINE.match(after.text):
                break
            more.append(after.text)
        return " ".join([f"{found.group('type')}:", *more])
    if PYDANTIC_HEADER.match(found.group("message")):
        for after in lines[at + 1:at + 1 + PYDANTIC_REASON_WITHIN]:
            for reason in PYDANTIC_REASONS:
                if after.text.startswith(reason):
                    return after.text[len(reason):].split(" [type=", 1)[0]
    return line.text


def root_cause(log: str) -> Cause | None:
    """The first exception in ``log`` that is not a consequence of another; the first consequence where there are
    only those; None where no traceback ended in ``log``."""
    lines = [_read(line) for line in log.splitlines()]
    raised = [(line.process, message) for at, line in enumerate(lines) if (message := _message(lines, at)) is not None]
    causes = [found for found in raised if not any(word in found[1] for word in CONSEQUENCES)]
    if not raised:
        return None
    process, message = (causes or raised)[0]
    return Cause(process, message[:MESSAGE_LIMIT], consequence=not causes)
