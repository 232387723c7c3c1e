"""The ``compat`` console script: one argparse subcommand per command module.

Each module ``compat/<cmd>.py`` brings ``DESCRIPTION`` (one line),
``add_arguments(parser)``, ``Options`` (a frozen dataclass whose ``from_args``
reads the parsed command line, refusing what it cannot mean) and
``run(options)``; this file only assembles them, so ``compat apply ...`` and
``python -m compat.apply ...`` parse the same way.  :func:`run_command` is the
one place a :class:`compat.errors.UsageError`, raised wherever a command finds
one, becomes its line on stderr and exit 2.
A bare ``compat`` prints the help and exits 2 (a usage error: no command given).
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import sys

from . import exit_policy
from .errors import UsageError, said

COMMANDS = ("apply", "plan", "surface", "catalogue", "confirm")
USAGE_ERROR = 2  # argparse's own exit status for a bad command line
#: confirm is a command above two pipelines' packages (compat/confirm/, compat/serve/): its own module picks one.
COMMAND_MODULES = {"confirm": "compat.confirm_command"}


def _describe(module) -> str:
    """The module's one-line DESCRIPTION in the help's style: capitalised, no final period, no markup."""
    text = module.DESCRIPTION.replace("``", "").strip().rstrip(".")
    return text[:1].upper() + text[1:]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="compat",
        description="Keep speculators' EAGLE-3 hidden-state generator running and correct on moving vLLM.",
        epilog="Run 'compat COMMAND --help' for a command's options.  Exit codes: 0 ok; 1 a patch problem, a needed "
        "patch not on disk or an unknown probe; 2 environment or usage problem; 3 nothing to patch: this speculators "
        "has neither the in-process generator of 0.3/0.4 nor the vllm serve path of >= 0.5; 4 (compat confirm --path serve) INCOMPLETE: a part not looked at, named; 141 the reader of stdout "
        "went away (| head).",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for name in COMMANDS:
        module = importlib.import_module(COMMAND_MODULES.get(name, f"compat.{name}"))
        description = _describe(module)
        sub = commands.add_parser(name, help=description, description=description)
        module.add_arguments(sub)
        sub.set_defaults(handler=module.run, options=module.Options, parser=sub)
    return parser


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Parse; an option the command does not know is reported with that command's usage and the closest option it
    has (``compat apply --dryrun``: did you mean --dry-run?), not with the top-level usage."""
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        command = getattr(args, "parser", parser)
        options = [o for action in command._actions for o in action.option_strings]
        hints = [f"{u}: did you mean {close[0]}?" for u in unknown
                 if (close := difflib.get_close_matches(u.split("=")[0], options, n=1, cutoff=0.6))]
        command.error(f"unrecognized arguments: {' '.join(unknown)}" + (f" ({'; '.join(hints)})" if hints else ""))
    return args


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not argv:
        parser.print_help(sys.stderr)
        return USAGE_ERROR
    args = parse(parser, argv)
    return run_command(args.command, args.options, args.handler, args)


def run_command(name: str, options, handler, args: argparse.Namespace) -> int:
    """Read ``args`` into the command's ``options`` type and run ``handler`` on them; a usage problem found on the
    way, while reading the options or deep in a run, is said once here and exits 2 (nothing was run or changed)."""
    try:
        return exit_policy.run(handler, options.from_args(args))
    except UsageError as problem:
        return said(problem, name)


if __name__ == "__main__":
    sys.exit(main())
