"""``compat confirm``: one command in front of the two pipelines, picking one for each run and each report.

The old path (speculators 0.3.0 / 0.4.x's in-process generator) is proven by compat/confirm/, the modern path
(speculators >= 0.5 through ``vllm serve``) by compat/serve/; neither imports the other.  This module stands above
both: it parses the shared command line (compat/shared/arguments.py), sends ``--path generator`` or
``--path serve`` to its pipeline, and ``--check REPORT`` to the gate of the pipeline that wrote the report.
``python -m compat.confirm`` and ``python -m compat.serve`` run the same command line.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys

from compat import pipelines
from compat.errors import UsageError
from compat.exit_policy import ENVIRONMENT, INTERRUPTED
from compat.pipelines import Pipeline
from compat.shared.arguments import DESCRIPTION, EXIT_CODES, add_arguments  # noqa: F401 (the console script's)
from compat.shared.options import ConfirmOptions

#: the console script reads the command line into this (compat/cli.py)
Options = ConfirmOptions


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

    return check(path, now=now, out=out, accept_weaker=accept_weaker, doc=doc)


def _serve(options: ConfirmOptions) -> int:
    """The serve path; a Ctrl-C while its modules import (before it can stop anything) still ends in one line."""
    try:
        from compat.serve.options import confirm_serve
    except KeyboardInterrupt:
        print("interrupted: nothing was started", file=sys.stderr, flush=True)
        return INTERRUPTED
    return confirm_serve(options, work_dir=options.work_dir, vocab=options.vocab)


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


def run(options: ConfirmOptions, **hooks) -> int:
    """``compat confirm`` on its options: --check, a serve-path run, or a generator-path run (``hooks``: RunSpec
    fields the generator path adds, for programs and tests).  Without --path, the installed speculators picks.  A
    usage problem, wherever either pipeline finds it, is raised (compat.cli.run_command says it)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if options.check:
        return check_report(options.check, accept_weaker=options.accept_weaker)
    if not options.model:  # both pipelines need it: the first thing to say, before which pipeline it would be
        raise UsageError("--model PATH is required (or --check REPORT)")
    if options.path is None:
        pipeline, read = installed_pipeline()
        if pipeline is None:
            raise UsageError(f"cannot tell which pipeline to confirm: {read}; pass --path generator (speculators "
                             f"0.3.0 / 0.4.x) or --path serve (speculators >= 0.5); nothing was run")
        options = options.replace(path=pipeline.name)
    if options.path == pipelines.SERVE.name:
        return _serve(options)
    from compat.confirm.cli import run_generator

    return run_generator(options, **hooks)


def main(argv=None, **hooks) -> int:
    """``python -m compat.confirm ARGS``; ``hooks`` are RunSpec fields (``on_imported``, ``on_reference``)."""
    from compat.cli import run_command

    parser = argparse.ArgumentParser(prog="compat confirm", description=DESCRIPTION, epilog=EXIT_CODES)
    add_arguments(parser)
    return run_command("confirm", ConfirmOptions, functools.partial(run, **hooks), parser.parse_args(argv))
