"""``python -m compat.apply``: decide, apply, verify or revert the patches this install needs.

    python -m compat.apply              apply (default)
    python -m compat.apply --dry-run    print the plan, change nothing
    python -m compat.apply --verify     re-check every postcondition and that files compile
    python -m compat.apply --revert     restore byte-identical pristine files
    --json PATH                         also write the report as JSON

Exit codes are documented in :mod:`compat.report`.
"""

from __future__ import annotations

import argparse
import sys

from . import registry, report
from .patcher import EnvironmentProblem, Manifest, PatchError, Patcher, open_target
from .surface import evaluate, installed_sources


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m compat.apply", description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print the plan; change nothing")
    mode.add_argument("--verify", action="store_true", help="re-check postconditions of applied patches")
    mode.add_argument("--revert", action="store_true", help="restore pristine files")
    parser.add_argument("--json", metavar="PATH", help="write the report as JSON")
    parser.add_argument("--exclude", action="append", default=[], metavar="ID", help="leave a patch out")
    parser.add_argument("--force", action="store_true", help="with --revert: restore even drifted files")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    mode = "dry-run" if args.dry_run else "verify" if args.verify else "revert" if args.revert else "apply"
    found = installed_sources()
    missing = [m for m in ("vllm", "speculators") if found[m][0] is None]
    if missing and not args.revert:
        for module in missing:
            print(f"error: {module} is not installed (no distribution provides the `{module}` module)", file=sys.stderr)
        report.write_json(args.json, report.document(mode, None, [], missing=missing, exit_code=2))
        return report.ENVIRONMENT
    try:
        if args.revert:
            return _revert(args)
        surface = evaluate(found["vllm"][1], found["speculators"][1], found["transformers"][1])
        decisions = registry.select(surface)
        for decision in decisions:
            if decision.patch.id in args.exclude:
                decision.verdict, decision.reason = "not-needed", "excluded with --exclude"
        patcher = Patcher(open_target("speculators"))
        for line in report.header(surface):
            print(line)
        written, problems = [], []
        if args.verify:
            patcher.plan(decisions, Manifest.load(patcher.target))
            problems = patcher.verify(_needed(decisions))
        else:
            if args.dry_run:
                try:
                    patcher.preflight()
                except EnvironmentProblem as exc:
                    problems.append(f"apply would refuse: {exc}")
            written = patcher.apply(decisions, surface.fingerprint(), dry_run=args.dry_run)
            if not args.dry_run and written is not None and not any(d.verdict in report.BLOCKING for d in decisions):
                problems = patcher.verify(_needed(decisions))
        for line in report.table(decisions):
            print(line)
        code = report.exit_code(decisions, problems)
        for problem in problems:
            print(f"problem: {problem}")
        if written:
            print(f"wrote {len(written)} file(s): {', '.join(written)}")
        print(f"{mode}: {report.summary(decisions)} -> exit {code}")
        report.write_json(
            args.json, report.document(mode, surface, decisions, written=written, problems=problems, exit_code=code)
        )
        return code
    except PatchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        report.write_json(args.json, report.document(mode, None, [], error=str(exc), exit_code=exc.exit_code))
        return exc.exit_code


def _needed(decisions):
    """Copies of the decisions that need a patch, re-marked ``needed`` for verification."""
    return [
        registry.Decision(d.patch, "needed", d.reason, d.variant)
        for d in decisions
        if d.verdict in ("apply", "already-applied")
    ]


def _revert(args) -> int:
    patcher = Patcher(open_target("speculators"))
    restored = patcher.revert(force=args.force)
    print(f"revert: restored {len(restored)} file(s)" + (f": {', '.join(restored)}" if restored else ""))
    report.write_json(args.json, report.document("revert", None, [], restored=restored, exit_code=0))
    return report.OK


if __name__ == "__main__":
    sys.exit(main())
