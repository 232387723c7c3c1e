"""``compat confirm``: one command in front of the two pipelines, picking one for each run and each report.

The old path (speculators 0.3.0 / 0.4.x's in-process generator) is proven by compat/confirm/, the modern path
(speculators >= 0.5 through ``vllm serve``) by compat/serve/; neither imports the other.  This module stands above
both: it parses the shared command line (compat/shared/arguments.py), sends ``--path generator`` or
``--path serve`` to its pipeline, and ``--check REPORT`` to the gate of the pipeline that wrote the report.
``python -m compat.confirm`` and ``python -m compat.serve`` run the same command line.
"""

from __future__ import annotations

import argparse
import os
import sys

from compat.exit_policy import ENVIRONMENT
from compat.shared.arguments import DESCRIPTION, EXIT_CODES, add_arguments  # noqa: F401 (the console script's)

#: the exit code of a Ctrl-C before the serve path could start anything: 128 + SIGINT, as a shell reports it
INTERRUPTED = 130


def check_report(path: str, accept_weaker: bool = False, out=None, now: dict | None = None) -> int:
    """``--check REPORT``: read it once, then the gate of the pipeline that wrote it (nothing is run or changed).
    ``now``: the installed surface an old-path report is compared with (default: read from this install)."""
    from compat.shared.report_file import ReportError, is_serve_report, load_json

    try:
        doc = load_json(path)
    except ReportError as exc:
        print(f"confirm --check: {exc}; nothing was checked", file=sys.stderr)
        return ENVIRONMENT
    if is_serve_report(doc):
        from compat.serve.check import check

        return check(path, doc, out or sys.stdout)
    from compat.confirm.report import check

    return check(path, now=now, out=out, accept_weaker=accept_weaker)


def _serve(args) -> int:
    """The serve path; a Ctrl-C while its modules import (before it can stop anything) still ends in one line."""
    try:
        from compat.serve.options import confirm_serve
    except KeyboardInterrupt:
        print("interrupted: nothing was started", file=sys.stderr, flush=True)
        return INTERRUPTED
    return confirm_serve(args)


def run(args, **hooks) -> int:
    """``compat confirm`` on parsed options: --check, a serve-path run, or a generator-path run (``hooks``: RunSpec
    fields the generator path adds, for programs and tests)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.check:
        return check_report(args.check, accept_weaker=args.accept_weaker)
    if args.path == "serve":
        return _serve(args)
    from compat.confirm.cli import run_generator

    return run_generator(args, **hooks)


def main(argv=None, **hooks) -> int:
    """``python -m compat.confirm ARGS``; ``hooks`` are RunSpec fields (``on_imported``, ``on_reference``)."""
    parser = argparse.ArgumentParser(prog="compat confirm", description=DESCRIPTION, epilog=EXIT_CODES)
    add_arguments(parser)
    return run(parser.parse_args(argv), **hooks)
