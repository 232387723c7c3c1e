"""``compat apply``: decide, apply, verify or revert the patches this install needs.

    compat apply              apply (default)
    compat apply --dry-run    print the plan, change nothing
    compat apply --verify     check what was applied, and say what is needed now
    compat apply --revert     restore byte-identical pristine files

Each patch names the distribution it edits (``Patch.target``); every target
is planned before any is written.  Exit codes are documented in
:mod:`compat.exit_policy`.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field, replace

from . import amx, exit_policy, install_checks, proven, registry, report, verdicts
from .errors import EnvironmentProblem, PatchError, UsageError
from .exit_policy import Finding
from .layout import GENERATOR, WORKER
from .output import Output
from .patcher import Patcher, Plan, open_target
from .serve import plan as serve_plan
from .sources import SourceError
from .surface import evaluate, installed_sources
from .verdicts import Decision

DESCRIPTION = "decide, apply, verify or revert the speculators patches this install needs"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print the plan; change nothing")
    mode.add_argument("--verify", action="store_true",
                      help="check what was applied (markers, sha256, compiles) and say what is needed now")
    mode.add_argument("--revert", action="store_true", help="restore byte-identical pristine files")
    parser.add_argument("--json", action="store_true", help="print the report as JSON instead of the table")
    parser.add_argument("--json-file", metavar="PATH", help="also write the report as JSON to PATH")
    parser.add_argument("--exclude", action="append", default=[], metavar="ID",
                        help="leave the patch with this id out (repeatable); with --verify: accept that it is "
                        "not on disk (without it, a needed patch that is not on disk is a problem)")
    parser.add_argument("--force", action="store_true", help="with --revert: restore even drifted files")
    parser.add_argument("--require-proven", action="store_true",
                        help="refuse (exit 1, nothing written) when a needed patch was never proven on this vLLM "
                        "release line with this generator (the records' leave-one-out proofs)")
    parser.add_argument("--brief", action="store_true",
                        help="list only patches with something to do or on disk (JSON still lists all)")


MODES = ("apply", "dry-run", "verify", "revert")


@dataclass(frozen=True)
class Options:
    """``compat apply``'s command line, checked: a combination that would silently do something else is refused
    here (UsageError, exit 2), before anything is read or written."""

    mode: str = "apply"  # one of MODES
    output: Output = Output()
    exclude: tuple[str, ...] = ()
    force: bool = False
    require_proven: bool = False
    brief: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "Options":
        mode = "dry-run" if args.dry_run else "verify" if args.verify else "revert" if args.revert else "apply"
        if args.force and mode != "revert":
            raise UsageError("--force only makes sense with --revert; nothing was changed")
        if args.exclude and mode == "revert":
            raise UsageError("--exclude has no meaning with --revert (revert restores every file); nothing was changed")
        return cls(mode, Output.checked(args.json, args.json_file), tuple(args.exclude), args.force,
                   args.require_proven, args.brief)


def main(argv: list[str] | None = None) -> int:
    from .cli import run_command

    parser = argparse.ArgumentParser(prog="compat apply", description=DESCRIPTION)
    add_arguments(parser)
    return run_command("apply", Options, run, parser.parse_args(argv))


@dataclass
class Result:
    """What running one mode over every target found; the exit code is :func:`compat.exit_policy.decide`'s."""

    decisions: list[Decision] = field(default_factory=list)
    problems: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)


def _refuse(options: Options, finding: Finding, surface=None, **extra) -> int:
    outcome = exit_policy.decide(options.mode, problems=[finding])
    print(f"error: {finding.text}", file=sys.stderr)
    doc = report.document(options.mode, surface, [], error=finding.text, exit_code=outcome.code, **extra)
    if options.output.json:
        options.output.write((), doc)
    else:
        options.output.write_file(doc)
    return outcome.code


def _environment(text: str) -> Finding:
    return Finding("environment", text)


def run(options: Options) -> int:
    """Run ``compat apply`` in the mode its options name (the output was checked writable before this)."""
    try:
        if options.mode == "revert":
            return _revert(options)
        return _decide(options)
    except PatchError as exc:
        return _refuse(options, exc.finding())
    except SourceError as exc:  # e.g. two installed copies of a package
        return _refuse(options, _environment(str(exc)))
    except OSError as exc:  # a file that could not be read or written on the way
        return _refuse(options, _environment(f"{exc.filename or 'output'}: {exc.strerror or exc}"))


def _finish(options: Options, mode: str, surface, result: Result, **extra) -> int:
    """Decide the exit code, print the table or the JSON document, write --json-file."""
    outcome = exit_policy.decide(mode, result.decisions, result.problems)
    lines = report.header(surface) if surface else []
    lines += report.table(result.decisions, brief=options.brief) if result.decisions else []
    lines += [p.text if p.kind in ("unsupported", "incompatible") else f"problem: {p.text}" for p in result.problems]
    lines += [f"note: {n}" for n in result.notes]
    if result.written:
        lines.append(f"wrote {len(result.written)} file(s): {', '.join(result.written)}")
    lines += extra.pop("lines", [])
    summary = report.summary(result.decisions)
    lines.append(f"{mode}: {summary + ' ' if summary else ''}-> {outcome.word}, exit {outcome.code}")
    doc = report.document(mode, surface, result.decisions, written=result.written,
                          problems=[p.text for p in result.problems], notes=result.notes, exit_code=outcome.code,
                          **extra)
    return options.output.write(lines, doc) or outcome.code


def _decide(options: Options) -> int:
    mode = options.mode
    found = installed_sources()
    missing = [m for m in ("vllm", "speculators") if found[m][0] is None]
    if missing:
        for module in missing[:-1]:
            print(f"error: {module} is not installed (no distribution provides the `{module}` module)", file=sys.stderr)
        module = missing[-1]
        message = f"{module} is not installed (no distribution provides the `{module}` module)"
        return _refuse(options, _environment(message), missing=missing)
    surface = evaluate(found["vllm"][1], found["speculators"][1], found["transformers"][1])
    judged = serve_plan.judge_installed(surface)  # speculators >= 0.5: the vllm serve path's plan
    serve = judged[0] if judged else None
    if serve is None and surface.values.get("speculators.generator") == "absent":
        message = (f"nothing to patch: speculators {surface.version('speculators')} has no hidden-states generator "
                   f"this kit knows ({GENERATOR} and {WORKER} are absent; speculators >= 0.5 generates hidden "
                   f"states through `vllm serve` and vLLM's own extract_hidden_states)")
        unsupported = Finding("unsupported", message)
        return _finish(options, mode, surface, Result(problems=[unsupported]), unsupported=message)
    decisions = serve if serve is not None else registry.select(surface)
    unknown = verdicts.unknown_ids(decisions, options.exclude)
    if unknown:
        known = ", ".join(d.patch.id for d in decisions)
        raise EnvironmentProblem(f"--exclude: no patch has the id {', '.join(unknown)} (known: {known}); "
                                 f"nothing was changed")
    decisions = list(verdicts.exclude(decisions, options.exclude))
    said, no = plan_said(surface, judged, found["vllm"][1])  # the plan's rules, printed on every path, and its NO
    device, runner = proven.device_of(surface), proven.runner_of(surface)
    unproven_first = proven.summary(decisions, surface.version("vllm"), device, runner, surface.version("speculators"))
    if no is not None and mode in ("apply", "dry-run"):  # the plan's NO stops apply with the plan's exit code
        return _finish(options, mode, surface, Result(decisions=decisions, problems=[no]), lines=said["lines"],
                       **said["doc"])
    if options.require_proven and unproven_first and mode in ("apply", "dry-run"):
        refused = Finding("problem", f"--require-proven: {unproven_first}; nothing was changed")
        return _finish(options, mode, surface, Result(decisions=decisions, problems=[refused]), lines=said["lines"],
                       **said["doc"])
    result = run_targets(mode, decisions, surface.fingerprint())
    install = install_level(mode, result, serve=serve is not None)
    if no is not None:  # --verify reads what is on disk, and still answers the plan's NO
        result.problems.append(no)
    # what confirm cannot prove, and the needed patches no record proved on this release line
    lines = said["lines"] + proven.user_proofs(result.decisions)
    unproven = proven.summary(result.decisions, surface.version("vllm"), device, runner, surface.version("speculators"))
    lines += [f"unproven: {unproven}"] if unproven else []
    return _finish(options, mode, surface, result, lines=lines, install=install, **said["doc"])


def install_level(mode: str, result: Result, serve: bool) -> dict:
    """The install's own faults (compat/install_checks.py): the ``vllm`` dist alias on the serve path (written by
    apply, checked by --verify) and torch companions built for another torch (named, with their fixing command)."""
    install = {}
    problem = install_checks.extras_problem()
    if problem:
        result.problems.append(Finding("problem", problem))
        install["torch_extras"] = problem
    found = install_checks.alias() if serve else None
    if found is None or not found.needed:
        return install
    install["dist_alias"] = found.as_json()
    if found.present:
        result.notes.append(f"{install_checks.ALIAS_ID}: on disk ({found.folder.name}, written by the kit)")
    elif mode == "apply":
        result.written.append(install_checks.write_alias(found))
        install["dist_alias"]["present"] = True
    elif mode == "verify":
        result.problems.append(Finding("problem", f"{install_checks.ALIAS_ID} is needed and not on disk: "
                                                  f"{found.reason}; run compat apply"))
    else:
        result.notes.append(f"{install_checks.ALIAS_ID}: needed, apply writes it: {found.reason}")
    return install


def plan_said(surface, judged, vllm=None) -> tuple[dict, Finding | None]:
    """What ``compat plan`` says of this install that no patch changes: its rules (FLAGS, NOTEs, a NO for some
    models) as lines and JSON, and its NO for every model as an ``incompatible`` finding (exit 1, as plan's NO:
    :mod:`compat.exit_policy`), or None.  The serve path's rules come from :func:`compat.serve.plan.rules`; the
    old path's NO from :func:`compat.plan.incompatible`, its rules from :func:`compat.amx.rules_for` (``vllm``: the
    installed vLLM's :class:`compat.sources.Source`)."""
    if judged is not None:
        _decisions, rules, (answer, _code) = judged
        no = answer if answer.startswith("NO:") else None
        said = {"lines": [serve_plan.rule_line(r) for r in rules],
                "doc": {"rules": [r.__dict__ for r in rules], "plan_answer": answer}}
    else:
        from .plan import incompatible  # the old path's combinations no patch rescues

        why = incompatible(surface)
        no = f"NO: {why}" if why else None
        rules = amx.rules_for(surface.packages.get("vllm"), vllm)
        said = {"lines": [amx.line(r) for r in rules],
                "doc": {**({"plan_answer": no} if no else {}), **({"rules": rules} if rules else {})}}
    if no is None:
        return said, None
    return said, Finding("incompatible", f"{no} (compat plan's answer for this install); nothing was changed")


def by_target(decisions: list[Decision]) -> dict[str, list[Decision]]:
    """Decisions grouped by the distribution module their patch edits (``Patch.target``), in registry order."""
    groups: dict[str, list[Decision]] = {}
    for decision in decisions:
        groups.setdefault(decision.patch.target, []).append(decision)
    return groups


def open_patchers(decisions: list[Decision], site=None) -> dict[str, Patcher]:
    """A patcher per target; a target that is not installed is an error only if one of its patches is needed."""
    patchers = {}
    for target, group in by_target(decisions).items():
        try:
            patchers[target] = Patcher(open_target(target, site))
        except EnvironmentProblem:
            if any(d.verdict == "needed" for d in group):
                raise
    return patchers


def run_targets(mode: str, decisions: list[Decision], fingerprint: str, site=None) -> Result:
    patchers = open_patchers(decisions, site)
    groups = by_target(decisions)
    outcome = Result()
    plans: dict[str, Plan] = {}
    if mode == "dry-run":
        for target, patcher in patchers.items():
            try:
                patcher.preflight()
            except EnvironmentProblem as exc:
                outcome.problems.append(Finding(exc.kind, f"apply would refuse: {exc}"))
            plans[target] = patcher.plan(groups[target])
            if plans[target].interrupted:
                outcome.problems.append(Finding("problem", plans[target].interrupted))
            if plans[target].running:
                outcome.problems.append(Finding("environment", plans[target].running))
    elif mode == "verify":
        for target, patcher in patchers.items():
            result = patcher.verify(groups[target])
            plans[target] = result.plan
            outcome.problems += [Finding("problem", p) for p in result.problems]
            if result.plan.running:
                outcome.problems.append(Finding("environment", result.plan.running))
            outcome.notes += result.notes
    else:
        if len(patchers) > 1:  # all or nothing across targets: plan every one before writing any
            preview = {t: p.plan(groups[t]) for t, p in patchers.items()}
            if any(p.blocked for p in preview.values()):
                plans, patchers = preview, {}
        for target, patcher in patchers.items():
            plans[target] = patcher.apply(groups[target], fingerprint)
            outcome.written += [f"{target}:{w}" if len(groups) > 1 else w for w in plans[target].written]
        if not any(p.blocked for p in plans.values()):
            for target, patcher in patchers.items():
                result = patcher.verify(groups[target])
                outcome.problems += [Finding("problem", p) for p in result.problems]
                outcome.notes += result.notes
                now = {d.patch.id: d.on_disk for d in result.plan.decisions}  # the verdict says what apply did,
                plans[target] = replace(plans[target], decisions=tuple(  # on_disk what is there now
                    replace(d, on_disk=now.get(d.patch.id, d.on_disk)) for d in plans[target].decisions))
    resolved = {d.patch.id: d for plan in plans.values() for d in plan.decisions}
    outcome.decisions = [resolved.get(d.patch.id, d) for d in decisions]
    return outcome


def _revert(options: Options) -> int:
    """Revert every target of both paths; one that cannot be reverted is a finding, the others are still reverted."""
    patches = registry.load_patches() + registry.load_patches("serve")  # both paths: revert restores every file
    result, missing = Result(), []
    targets = sorted({p.target for p in patches})
    for target in targets:
        try:
            patcher = Patcher(open_target(target))
        except EnvironmentProblem as exc:
            missing.append(exc)
            continue
        watched = sorted({f for p in patches if p.target == target for v in p.edits for f in p.files(v)})
        try:
            result.written += patcher.revert(force=options.force, watched=watched)
        except PatchError as exc:  # a refusal, on stderr as every refusal; the report lists it too
            print(f"error: {exc}", file=sys.stderr)
            result.problems.append(exc.finding())
    if len(missing) == len(targets):
        raise missing[0]
    restored = result.written + install_checks.remove_alias()
    lines = [f"revert: restored {len(restored)} file(s)" + (f": {', '.join(restored)}" if restored else "")]
    return _finish(options, "revert", None, replace(result, written=[]), restored=restored, lines=lines)


if __name__ == "__main__":
    sys.exit(main())
