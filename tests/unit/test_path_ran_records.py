"""A passing record of a path makes that path proven where it ran: release line, device, model runner and, for the
serve path, the speculators client that ran; nowhere else.

Independent expectations: the GPU records in ``docs/coverage/gpu/`` are read here as JSON (not through the kit):
vLLM 0.34.0 on an H100 ran ``compat confirm --path serve`` with speculators 0.9.0's client on Model Runner V2 and
passed, once with ``--no-enable-extensible-kv-cache`` and otherwise with vLLM's default (the extensible KV cache, on
by default on CUDA in 0.34.0: ``CacheConfig.enable_extensible_kv_cache``).  No record ran vLLM 0.33 on CUDA, and
none ran speculators 0.8 against 0.34.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.wheels import wheel

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "docs" / "coverage" / "gpu"


def _plan(vllm: str, speculators: str, *extra: str) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, "-m", "compat.plan", "--wheel", str(wheel(vllm)), "--speculators",
                           str(wheel(speculators)), "--json", *extra], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    return proc.returncode, json.loads(proc.stdout)


def _serve_records(vllm: str) -> list[dict]:
    """The passing serve records of vLLM ``vllm`` that name their commit and ran Model Runner V2 (read as JSON)."""
    out = []
    for path in sorted(GPU.glob("*.json")):
        doc = json.loads(path.read_text())
        runners = {str(r).lower() for r in (doc.get("details") or {}).get("runners", {}).values()}
        runners |= {str((o or {}).get("runner")).lower() for o in ((doc.get("details") or {}).get("resolved") or {}).values()}
        if (doc.get("path") == "serve" and doc.get("status") == "pass" and doc.get("commit")
                and (doc.get("versions") or {}).get("vllm") == vllm and runners == {"v2"}):
            out.append({"name": path.stem, **doc})
    return out


def test_the_0_34_records_ran_v2_with_speculators_0_9_and_passed():
    records = _serve_records("0.34.0")
    assert records, "no passing vLLM 0.34.0 serve record on Model Runner V2"
    assert {r["versions"]["speculators"] for r in records} == {"0.9.0"}


def test_a_passing_0_34_record_proves_the_serve_path_there_for_its_client_only():
    code, doc = _plan("vllm==0.34.0", "speculators==0.9.0")
    assert code == 0 and doc["runner"]["runners"] == ["v2"]
    assert doc["unproven_path"] is None, doc["unproven_path"]
    assert doc["unproven"] == ["speculators.serve.validate_fp8"]  # no record left it out on 0.34
    code, doc = _plan("vllm==0.34.0", "speculators==0.8.1")  # another client: no record ran it there
    assert doc["unproven_path"] and "vLLM 0.34 (cuda, Model Runner V2)" in doc["unproven_path"], doc["unproven_path"]
    code, doc = _plan("vllm==0.33.0", "speculators==0.9.0")  # another release line: none ran it
    assert doc["unproven_path"] and "vLLM 0.33" in doc["unproven_path"], doc["unproven_path"]


@pytest.mark.parametrize("speculators", ["speculators==0.9.0"])
def test_the_extensible_kv_cache_note_names_the_records_that_ran_it_on_and_off(speculators):
    records = [r for r in _serve_records("0.34.0") if "serve_args" in r["details"]]
    off = sorted(r["name"] for r in records if "--no-enable-extensible-kv-cache" in r["details"]["serve_args"])
    on = sorted(r["name"] for r in records if "--no-enable-extensible-kv-cache" not in r["details"]["serve_args"])
    assert on and off
    _code, doc = _plan("vllm==0.34.0", speculators)
    said = [r["text"] for r in doc["rules"] if "extensible KV cache is on by default" in r["text"]]
    assert len(said) == 1, said
    assert f"on in {len(on)} ({', '.join(on)})" in said[0] and f"off in {len(off)} ({', '.join(off)})" in said[0], said
