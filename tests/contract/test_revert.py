"""d. --revert gives back the pristine files, and the original failure returns.

The files checked are every file any declaration edits (for any generator
release): what the kit writes is a fact of the declarations, independent of
upstream, so none can be forgotten here (speculators/config.py included).
"""

from __future__ import annotations

import base64
import hashlib

from compat.registry import load_patches
from tests.contract.conftest import compat, harness

FILES = sorted({rel for patch in load_patches() if patch.target == "speculators"
                for variant in patch.edits for rel in patch.files(variant)})


def _installed(vllm_installed) -> dict:
    """sha256 of each file the kit may edit, as it is on disk now."""
    dist = vllm_installed["speculators"][0]
    return {f: hashlib.sha256(dist.locate_file(f).read_bytes()).hexdigest()
            for f in FILES if dist.locate_file(f).exists()}


def _record(vllm_installed) -> dict:
    """sha256 of the same files as the distribution's RECORD states them."""
    dist = vllm_installed["speculators"][0]
    return {str(f): base64.urlsafe_b64decode(f.hash.value + "==").hex() for f in dist.files if str(f) in FILES}


def test_the_kit_edits_the_config_module_too():
    assert "speculators/config.py" in FILES, FILES  # the transformers-5 import patch


def test_revert_restores_pristine_and_the_failure(vllm_installed, pristine_report, patched_report, tiny_model, tmp_path):
    assert pristine_report["run"]["ok"] is False, "the pristine generator should fail on this lane"
    record = _record(vllm_installed)
    assert set(record) == set(FILES), f"RECORD lacks {set(FILES) - set(record)}"
    compat()  # every needed patch on disk, whatever earlier tests left
    patched = _installed(vllm_installed)
    assert patched != record, "no file differs from RECORD after apply: nothing to revert?"
    compat("--revert")
    assert _installed(vllm_installed) == record
    again = harness(tmp_path / "r.json", tiny_model, "--calls", "1")["run"]
    first = pristine_report["run"]["error"]
    assert again["error"] is not None and again["error"]["type"] == first["type"]
    assert again["error"]["message"] == first["message"]
    compat()  # leave the lane patched, as a user would
    assert compat("--verify").returncode == 0
