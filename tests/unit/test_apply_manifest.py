"""A manifest that is valid JSON with wrong types is a clear refusal (exit 2) in every mode,
and ``--revert --force`` restores pristine from the backups and RECORD alone.

Each case below is a manifest a real apply wrote, with one field given the wrong type or shape."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from compat.patcher import EnvironmentProblem, Patcher, open_target
from tests.unit import toy
from tests.unit.test_apply_hardening import cli, no_traceback, site, snapshot, template  # noqa: F401

SHA = "0" * 64


def _set(path: tuple, value):
    def change(doc: dict) -> dict:
        doc = copy.deepcopy(doc)
        node = doc
        for key in path[:-1]:
            node = node[key(node) if callable(key) else key]
        last = path[-1]
        node[last(node) if callable(last) else last] = value
        return doc
    return change


def _first(node: dict) -> str:
    return next(iter(node))


def _pending(files: dict, state=None) -> dict:
    return {"action": "apply", "started_at": "2026-12-01T00:00:00Z", "pid": 1, "files": files, "state": state}


WRONG = {
    "schema-as-string": _set(("schema",), "2"),
    "schema-as-bool": _set(("schema",), True),
    "files-as-list": _set(("files",), []),
    "file-entry-as-string": _set(("files", _first), "x"),
    "file-patches-as-string": _set(("files", _first, "patches"), "toy.x"),
    "file-patches-holding-an-int": _set(("files", _first, "patches"), [1]),
    "known-sha256-as-int": _set(("files", _first, "known_sha256"), 5),
    "known-sha256-holding-a-dict": _set(("files", _first, "known_sha256"), [{}]),
    "patched-sha256-null": _set(("files", _first, "patched_sha256"), None),
    "pristine-sha256-not-hex": _set(("files", _first, "pristine_sha256"), "zz"),
    "patches-as-int": _set(("patches",), 5),
    "excluded-as-string": _set(("excluded",), "toy.y"),
    "dist-as-int": _set(("dist",), 5),
    "pending-as-list": _set(("pending",), []),
    "pending-action-unknown": _set(("pending",), {**_pending({}), "action": "delete"}),
    "pending-pid-as-string": _set(("pending",), {**_pending({}), "pid": "1"}),
    "pending-sha-as-int": _set(("pending",), _pending({"toy/a.py": {"before_sha256": 1, "after_sha256": 2}})),
    "pending-state-as-string": _set(("pending",), _pending({}, state="x")),
    "pending-state-files-as-list": _set(("pending",), _pending({}, {"files": [], "patches": [], "excluded": []})),
    "pending-path-outside-the-site": _set(("pending",), _pending(
        {"../../outside.py": {"before_sha256": None, "after_sha256": SHA}})),
    "absolute-path": _set(("files",), {"/etc/hosts": {"pristine_sha256": SHA, "patched_sha256": SHA,
                                                      "known_sha256": [SHA], "patches": []}}),
    "unknown-field": _set(("surprise",), 1),
}


def _corrupt(site: Path, change) -> Path:
    path = site / ".specdec-compat" / "toy-1.0" / "manifest.json"
    path.write_text(json.dumps(change(json.loads(path.read_text()))))
    return path


@pytest.mark.parametrize("case", sorted(WRONG))
def test_a_wrong_type_is_refused_in_every_mode_and_force_revert_restores_pristine(tmp_path, case):
    site = toy.make_site(tmp_path)
    toy.apply(site, {"toy.x", "toy.y"})
    _corrupt(site, WRONG[case])
    before = toy.snapshot(site)
    patcher = Patcher(open_target("toy", site))
    for mode, call in (("plan", lambda: patcher.plan(toy.decisions({"toy.x"}))),
                       ("verify", lambda: patcher.verify(toy.decisions({"toy.x"}))),
                       ("apply", lambda: patcher.apply(toy.decisions({"toy.x", "toy.f"}), "fp")),
                       ("revert", lambda: patcher.revert())):
        with pytest.raises(EnvironmentProblem, match="corrupt manifest") as info:
            call()
        assert info.value.exit_code == 2, mode
        assert toy.snapshot(site) == before, mode
    assert patcher.revert(force=True) == ["toy/a.py", "toy/b.py"]
    assert toy.snapshot(site) == toy.PRISTINE
    assert not (site / ".specdec-compat" / "toy-1.0").exists()


def test_the_cli_refuses_a_wrong_typed_manifest_with_exit_2_and_force_reverts(site):
    pristine = snapshot(site)
    assert cli(site).returncode == 0
    manifest = next((site / ".specdec-compat").glob("speculators-*/manifest.json"))
    doc = json.loads(manifest.read_text())
    doc["files"][next(iter(doc["files"]))]["patches"] = "not a list"
    manifest.write_text(json.dumps(doc))
    patched = snapshot(site)
    for mode in ((), ("--dry-run",), ("--verify",), ("--revert",)):
        proc = cli(site, *mode)
        no_traceback(proc)
        assert proc.returncode == 2, (mode, proc.stdout + proc.stderr)
        assert "corrupt manifest" in proc.stderr and "patches" in proc.stderr, proc.stderr
        assert snapshot(site) == patched
    forced = cli(site, "--revert", "--force")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert snapshot(site) == pristine

