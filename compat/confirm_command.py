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

from compat import pipelines
from compat.errors import UsageError
from compat.exit_policy import ENVIRONMENT
from compat.pipelines import Pipeline
from compat.shared.arguments import DESCRIPTION, EXIT_CODES, add_arguments  # noqa: F401 (the console script's)
from compat.shared.options import said

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


def installed_pipeline() -> tuple[Pipeline | None, str]:
    """The pipeline the speculators installed here takes, and how that was read (or why it could not be)."""
    from compat.dists import AmbiguousInstall, find_distribution

    try:
        dist = find_distribution("speculators")
    except AmbiguousInstall as exc:
        return None, f"more than one speculators could be imported here ({exc})"
    if dist is None:
        return None, "speculators is not installed in this environment"
    pipeline = pipelines.for_speculators(dist.version)
    if pipeline is None:
        return None, f"the installed speculators' version {dist.version!r} is not a version"
    return pipeline, f"speculators {dist.version} is installed"


def run(args, **hooks) -> int:
    """``compat confirm`` on parsed options: --check, a serve-path run, or a generator-path run (``hooks``: RunSpec
    fields the generator path adds, for programs and tests).  Without --path, the installed speculators picks.  A
    usage problem, wherever either pipeline finds it, becomes its line and exit 2 here."""
    try:
        return _run(args, **hooks)
    except UsageError as problem:
        return said(problem)


def _run(args, **hooks) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.check:
        return check_report(args.check, accept_weaker=args.accept_weaker)
    if not args.model:  # both pipelines need it: the first thing to say, before which pipeline it would be
        raise UsageError("--model PATH is required (or --check REPORT)")
    if args.path is None:
        pipeline, read = installed_pipeline()
        if pipeline is None:
            raise UsageError(f"cannot tell which pipeline to confirm: {read}; pass --path generator (speculators "
                             f"0.3.0 / 0.4.x) or --path serve (speculators >= 0.5); nothing was run")
        args.path = pipeline.name
    if args.path == pipelines.SERVE.name:
        return _serve(args)
    from compat.confirm.cli import run_generator

    return run_generator(args, **hooks)


def main(argv=None, **hooks) -> int:
    """``python -m compat.confirm ARGS``; ``hooks`` are RunSpec fields (``on_imported``, ``on_reference``)."""
    parser = argparse.ArgumentParser(prog="compat confirm", description=DESCRIPTION, epilog=EXIT_CODES)
    add_arguments(parser)
    return run(parser.parse_args(argv), **hooks)
