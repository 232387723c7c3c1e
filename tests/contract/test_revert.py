"""d. --revert gives back the pristine files, and the original failure returns."""

from __future__ import annotations

import hashlib

from tests.contract.conftest import compat, harness

FILES = (
    "speculators/data_generation/vllm_hidden_states_generator.py",
    "speculators/data_generation/custom_worker.py",
)


def _shas(vllm_installed):
    dist = vllm_installed["speculators"][0]
    return {f: hashlib.sha256(dist.locate_file(f).read_bytes()).hexdigest() for f in FILES}


def _record(vllm_installed):
    import base64

    dist = vllm_installed["speculators"][0]
    out = {}
    for f in dist.files:
        if str(f) in FILES:
            out[str(f)] = base64.urlsafe_b64decode(f.hash.value + "==").hex()
    return out


def test_revert_restores_pristine_and_the_failure(vllm_installed, pristine_report, patched_report, tiny_model, tmp_path):
    assert pristine_report["run"]["ok"] is False, "the pristine generator should fail on this lane"
    compat("--revert")
    assert _shas(vllm_installed) == _record(vllm_installed)
    again = harness(tmp_path / "r.json", tiny_model, "--calls", "1")["run"]
    first = pristine_report["run"]["error"]
    assert again["error"] is not None and again["error"]["type"] == first["type"]
    assert again["error"]["message"] == first["message"]
    compat()  # leave the lane patched, as a user would
    assert compat("--verify").returncode == 0
