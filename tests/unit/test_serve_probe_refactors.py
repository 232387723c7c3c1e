"""Refactor corpus of the serve-path probes: real release source, mutated the way upstream refactors happen.

Each case rewrites one release's files (rename a helper, move the connector
class to another module behind a re-export, compute a literal, extract a
condition into a helper) and requires the probe to give the release's true
value (from ``test_serve_probes``' change-point tables) or ``unknown``, never
another value.
"""

from __future__ import annotations

import re

import pytest

from compat.astkit import Reader
from compat.probes import PROBES, Reading, Unknown
from compat.serve.probes.connector import HS_MOONCAKE, VLLM_CONNECTOR, VLLM_CONNECTOR_MODULE
from compat.sources import WheelSource
from fixtures.wheels import wheel
from tests.unit.test_probe_refactors import Overlay
from tests.unit.test_serve_probes import (HS_CONNECTORS_CHANGES, LISTS, SPECULATORS_CHANGES, VLLM_CHANGES, expected,
                                          list_fact, vllm_requirement)

SPECULATIVE = "vllm/config/speculative.py"
VLLM_CONFIG = "vllm/config/vllm.py"
KV_UTILS = "vllm/v1/core/kv_cache_utils.py"
MODELS = "vllm/model_executor/models"
CLIENT = "speculators/data_generation/vllm_client.py"
OFFLINE = "speculators/data_generation/offline.py"
CPU_STAND_INS = "vllm/utils/cpu_triton_utils.py"
SAMPLER = "vllm/v1/sample/rejection_sampler.py"
MOVED = "vllm/distributed/kv_transfer/kv_connector/v1/hidden_states/connector.py"


def rename(relpath, old, new):
    def mutate(src):
        src.files[relpath] = re.sub(rf"\b{old}\b", new, src.read(relpath))
    mutate.__name__ = f"rename_{old}"
    return mutate


def split_literal(relpath, literal):
    def mutate(src):
        half = len(literal) // 2
        src.files[relpath] = src.read(relpath).replace(f'"{literal}"', f'("{literal[:half]}" + "{literal[half:]}")')
    mutate.__name__ = f"split_{literal}"
    return mutate


def move_connector_class(src):
    """ExampleHiddenStatesConnector moves to its own module; the old one re-exports it."""
    text = src.read(VLLM_CONNECTOR)
    start = text.index("class ExampleHiddenStatesConnector(")
    end = text.find("\nclass ", start + 1)
    end = len(text) if end < 0 else end
    head = text[:text.index("\n\n\n") + 1]  # the module's imports
    helpers = f"from {VLLM_CONNECTOR_MODULE} import *  # noqa\n"
    src.files[MOVED] = head + helpers + "\n\n" + text[start:end]
    moved = MOVED[:-3].replace("/", ".")
    src.files[VLLM_CONNECTOR] = text[:start] + f"from {moved} import ExampleHiddenStatesConnector\n" + text[end:]


def wrap_in_helper(relpath, function, helper):
    """Move ``function``'s body to a new module-level ``helper`` it calls."""
    def mutate(src):
        text = src.read(relpath)
        src.files[relpath] = text.replace(f"def {function}(", f"def {helper}(") + (
            f"\n\ndef {function}(*args, **kwargs):\n    return {helper}(*args, **kwargs)\n")
    mutate.__name__ = f"wrap_{function}"
    return mutate


PROPOSER = "vllm/v1/spec_decode/extract_hidden_states.py"
REJECTION_SAMPLER = "vllm/v1/sample/rejection_sampler.py"
#: the capture moves out of the mixin, the buffer's count is computed elsewhere
LAYER_ID_REFACTORS = [("0.17.0", rename(f"{MODELS}/llama.py", "aux_hidden_state_layers", "capture_layers")),
                      ("0.25.0", rename(f"{MODELS}/interfaces.py", "EagleModelMixin", "AuxCaptureMixin")),
                      ("0.32.0", rename(PROPOSER, "num_hidden_states", "n_rows")),
                      ("0.32.0", wrap_in_helper(PROPOSER, "propose", "_propose"))]
CONNECTOR_RELEASES = ("0.20.0", "0.23.0", "0.24.0", "0.25.0", "0.29.0")
CORPUS = {
    "serve.method": [("0.22.0", split_literal(SPECULATIVE, "extract_hidden_states"))],
    "serve.allowlist": [("0.18.0", rename(SPECULATIVE, "aux_hidden_states_supported", "supported_models"))],
    "serve.connector.kv_cache_config": [(r, move_connector_class) for r in ("0.20.0", "0.21.0")],
    "serve.connector.write_mode": [(r, move_connector_class) for r in CONNECTOR_RELEASES]
    + [("0.25.0", rename(VLLM_CONNECTOR, "_submit_async_write", "_write_one"))],
    "serve.connector.lock": [(r, move_connector_class) for r in ("0.21.0", "0.25.0")]
    + [("0.25.0", rename(VLLM_CONNECTOR, "load_hidden_states", "read_hidden_states"))],
    "serve.connector.index_axis": [("0.22.0", rename(VLLM_CONNECTOR, "block_size", "bs")),
                                   ("0.29.0", wrap_in_helper(VLLM_CONNECTOR, "extract_from_kv_cache", "_extract"))],
    "serve.connector.kv_layout": [(r, move_connector_class) for r in ("0.28.0", "0.29.0")],
    "serve.connector.block_size": [(r, move_connector_class) for r in ("0.24.0", "0.25.0")]
    + [("0.25.0", rename(VLLM_CONNECTOR, "_get_cache_block_size", "_hs_block_size"))],
    "serve.connector.group_lookup": [(r, move_connector_class) for r in ("0.23.0", "0.24.0", "0.25.0")]
    + [("0.25.0", rename(VLLM_CONNECTOR, "_find_cache_kv_group_id", "_hs_group"))],
    "serve.kv.min_page_size": [("0.30.0", rename(KV_UTILS, "_ensure_min_page_size", "_grow_min_page"))],
    "serve.kv.hidden_state_pages": [("0.22.0", rename(KV_UTILS, "common_page", "page_bytes")),
                                    ("0.29.0", rename(KV_UTILS, "HiddenStateCacheSpec", "HiddenSpec"))],
    "serve.kv.groups_module": [("0.30.0", rename(KV_UTILS, "get_kv_cache_groups", "build_kv_cache_groups"))],
    "serve.config.chunked_prefill": [("0.22.0", split_literal(VLLM_CONFIG, "ExampleHiddenStatesConnector")),
                                     ("0.24.0", rename(VLLM_CONFIG, "VllmConfig", "EngineConfig"))],
    "serve.capture.llama": [("0.17.0", rename(f"{MODELS}/llama.py", "aux_hidden_state_layers", "capture_layers")),
                            ("0.18.0", rename(f"{MODELS}/llama.py", "_maybe_add_hidden_state", "_capture"))],
    "serve.capture.deepseek_v2": [("0.24.0", rename(f"{MODELS}/deepseek_v2.py", "end_layer", "last_layer")),
                                  ("0.25.0", rename(f"{MODELS}/deepseek_v2.py", "end_layer", "last_layer"))],
    "serve.capture.kimi_k25": [("0.18.0", rename(f"{MODELS}/kimi_k25.py", "language_model", "text_model"))],
    "serve.v2.extractor": [("0.29.0", rename("vllm/v1/worker/gpu/spec_decode/extract_hidden_states.py",
                                             "ExtractHiddenStatesSpeculator", "HiddenStatesSpeculator"))],
    "serve.pp.deepseek_v2": [("0.25.0", rename(f"{MODELS}/deepseek_v2.py", "DeepseekV2Model", "DeepseekModel"))],
    "serve.cpu.spec_decode": [("0.19.1", rename("vllm/v1/worker/cpu_model_runner.py", "CPUModelRunner", "CpuRunner"))],
    "serve.connector.last_chunk": [(r, move_connector_class) for r in ("0.21.0", "0.25.0")]
    + [("0.21.0", rename(VLLM_CONNECTOR, "new_block_ids", "added_blocks"))],
    "serve.cpu.aux_layers": [(r, rename("vllm/v1/worker/cpu_model_runner.py", "load_model", "load_weights"))
                             for r in ("0.21.0", "0.22.0")]
    + [("0.22.0", rename(path, "_setup_eagle3_aux_hidden_state_outputs", "_setup_aux_outputs"))
       for path in ("vllm/v1/worker/cpu_model_runner.py", "vllm/v1/worker/gpu_model_runner.py")],
    "serve.cpu.pin_memory": [(r, move_connector_class) for r in ("0.21.0", "0.25.0")],
    "serve.cpu.connector_copy": [(r, move_connector_class) for r in ("0.21.0", "0.25.0")]
    + [("0.25.0", rename("vllm/v1/worker/cpu/shm.py", "_EventPlaceholder", "_Event"))],
    "serve.cpu.recovered_sampler": [(r, m) for r in ("0.22.0", "0.24.0", "0.25.0") for m in (
        rename(CPU_STAND_INS, "_sample_recovered_tokens_kernel_impl", "_recovered_impl"),
        rename(CPU_STAND_INS, "_FuncWrapper", "_Launcher"),
        rename(SAMPLER, "sample_recovered_tokens_kernel", "recovered_tokens_kernel"))],
    "serve.cpu.sampler_dispatch": [
        ("0.30.0", rename(REJECTION_SAMPLER, "triton_kernel_dispatcher_with_warmup", "jit_dispatcher")),
        ("0.29.0", wrap_in_helper(REJECTION_SAMPLER, "expand_batch_to_tokens", "_expand_batch")),
        ("0.29.0", rename(REJECTION_SAMPLER, "triton", "tr")),
        ("0.30.0", rename("vllm/v1/worker/cpu_model_runner.py", "rejection_sampler", "sampling")),
        ("0.32.0", rename("vllm/platforms/cpu.py", "register_kernels", "register_overrides"))],
    "serve.cpu.event_query": [("0.25.0", rename("vllm/v1/worker/cpu/shm.py", "_EventPlaceholder", "_Event"))],
    "serve.cpu.stream_stand_ins": [("0.28.0", rename("vllm/v1/worker/cpu/shm.py", "_StreamPlaceholder", "_Stream")),
                                   ("0.25.0", rename("vllm/v1/worker/cpu/shm.py", "wait_stream", "wait_for"))],
    "serve.layer_ids.repeated": LAYER_ID_REFACTORS,
    "serve.speculators.lock_wait": [("speculators==0.6.0.2", rename(CLIENT, "fcntl", "fc")),
                                    ("speculators==0.5.0", rename(CLIENT, "extract_output", "read_output"))],
    "serve.speculators.handle": [("speculators==0.8.1", split_literal(CLIENT, "handle"))],
    "serve.speculators.version_py": [("speculators==0.7.0.2", rename("speculators/version.py", "version", "release"))],
    "serve.speculators.hs_connectors": [("speculators==0.7.0.2", rename("speculators/_vendor/hs_connectors/__init__.py",
                                                                        "hs_connectors", "hsc"))],
    "serve.speculators.check_hidden_states": [("speculators==0.9.0", rename(OFFLINE, "hs", "hidden"))],
    "serve.speculators.launch_chunked_prefill": [("speculators==0.7.0.2", rename(CLIENT, "fcntl", "fc"))],
    "serve.hs_connectors.mooncake.index_axis": [("hs-connectors==0.7.0", rename(HS_MOONCAKE, "block_size", "bs")),
                                                ("hs-connectors==0.9.0", rename(HS_MOONCAKE, "extract_from_kv_cache",
                                                                                "extract"))],
    "serve.hs_connectors.mooncake.kv_layout": [("hs-connectors==0.7.0", split_literal(HS_MOONCAKE, "NHD"))],
    "serve.hs_connectors.mooncake.host_copy": [("hs-connectors==0.7.0", rename(HS_MOONCAKE, "empty_like", "empty")),
                                               ("hs-connectors==0.9.0", rename(HS_MOONCAKE, "accelerator_module", "accel"))],
    "serve.hs_connectors.fp8": [("hs-connectors==0.9.0", rename("hs_connectors/fp8_hidden_states_connector.py",
                                                                "_write_tensors", "_write"))],
}
V2_CONNECTOR = "vllm/v1/worker/gpu/kv_connector.py"
CORPUS.update({
    "serve.runner": [("0.32.0", rename(VLLM_CONFIG, "_get_v2_model_runner_unsupported_features", "_v2_gaps")),
                     ("0.29.0", split_literal(VLLM_CONFIG, "extract_hidden_states")),
                     ("0.32.0", rename(VLLM_CONFIG, "HAS_TRITON", "TRITON_OK"))],
    "serve.cpu.v2_runner": [("0.32.0", rename("vllm/v1/worker/cpu/model_runner.py", "GPUModelRunner", "BaseRunner")),
                            ("0.32.0", rename("vllm/triton_utils/importing.py", "backends", "found"))],
    "serve.connector.save_wait": [("0.33.0", rename(V2_CONNECTOR, "defer_finalize", "defer")),
                                  ("0.33.0", rename(V2_CONNECTOR, "finalize_step", "finish_step")),
                                  ("0.26.0", rename(V2_CONNECTOR, "wait_for_save", "save_wait"))],
    "serve.connector.base_methods": [("0.33.0", rename("vllm/distributed/kv_transfer/kv_connector/v1/base.py",
                                                       "KVConnectorBase_V1", "KVConnectorBase"))],
    "serve.config.speculative_fields": [("0.33.0", rename(SPECULATIVE, "SpeculativeConfig", "SpecConfig"))],
})
TABLES = {**VLLM_CHANGES, **SPECULATORS_CHANGES, **HS_CONNECTORS_CHANGES}
CASES = [pytest.param(name, release, mutation, id=f"{name}-{release}-{mutation.__name__}")
         for name, cases in sorted(CORPUS.items()) for release, mutation in cases]


def _requirement(release: str) -> str:
    return release if "==" in release else vllm_requirement(release)


def _truth(name: str, release: str):
    if name in LISTS:
        return list_fact(name, _requirement(release))
    return expected(TABLES[name], release.split("==")[-1])


@pytest.mark.parametrize("name, release, mutation", CASES)
def test_serve_probe_gives_the_truth_or_unknown_after_a_refactor(name, release, mutation):
    overlay = Overlay(WheelSource(wheel(_requirement(release))))
    before = {k: overlay.read(k) for k in ()}
    mutation(overlay)
    assert overlay.files and before == {}, "the mutation changed nothing"
    assert any(overlay.files[k] != overlay.base.read(k) for k in overlay.files), "the mutation changed nothing"
    result = PROBES[name].run(Reader(overlay))
    if isinstance(result, Unknown):
        return
    assert isinstance(result, Reading)
    assert result.value == _truth(name, release), f"{name} on {release} after {mutation.__name__}: {result.value!r}"


def test_every_serve_probe_is_in_the_corpus():
    assert set(CORPUS) == {n for n in PROBES if n.startswith("serve.")}
