"""d. --revert gives back the pristine files, and the original failure returns.

The files checked are every file any declaration edits (for any generator
release): what the kit writes is a fact of the declarations, independent of
upstream, so none can be forgotten here (speculators/config.py included).
"""

from __future__ import annotations

import base64
import hashlib

from compat.registry import load_patches
from tests.contract.conftest import compat

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


def test_revert_restores_pristine_and_the_failure(vllm_installed, pristine_report, reverted_report):
    """In the cell's harness: pristine run, `compat.apply`, `compat.apply --revert`, the generator run again."""
    assert pristine_report["run"]["ok"] is False, "the pristine generator should fail on this lane"
    record = _record(vllm_installed)
    assert set(record) == set(FILES), f"RECORD lacks {set(FILES) - set(record)}"
    assert pristine_report["files"] == record, "the pristine run did not run on the files pip installed"
    assert reverted_report["applied_files"] != record, "no file differs from RECORD after apply: nothing to revert?"
    assert reverted_report["files"] == record
    again = reverted_report["run"]
    first = pristine_report["run"]["error"]
    assert again["error"] is not None and again["error"]["type"] == first["type"]
    assert again["error"]["message"] == first["message"]


def test_revert_on_disk_and_apply_again(vllm_installed, patched_report):
    """The same file-level round trip here, after every engine of the cell: RECORD's bytes back, then the patches."""
    record = _record(vllm_installed)
    compat()  # every needed patch on disk, whatever earlier tests left
    assert _installed(vllm_installed) != record
    compat("--revert")
    assert _installed(vllm_installed) == record
    compat()  # leave the lane patched, as a user would
    assert compat("--verify").returncode == 0
