"""``compat confirm --check``: the CI gate certifies only a full-strength OK report of this install.

Today's code certified any OK report: ``--reference none``, ``--rtol 1000`` and one layer passed.  A report is
full strength when it compared with a real reference, under the automatic bound (or a stricter one), every layer
and the default calls; anything weaker is named and exits 1 unless ``--accept-weaker``.  The tie to the install
covers every file the kit patches: ``speculators/config.py`` (the transformers-5 annotation patch) was missing.
"""

from __future__ import annotations

import io
import json

import pytest

from compat.confirm.report import check, patched_files, weaknesses

NOW = {"format": 2, "fingerprint": "a7f52384369c7c72",
       "versions": {"python": "3.11.7", "vllm": "0.32.0", "torch": "2.13.0+cpu", "transformers": "5.19.0",
                    "speculators": "0.4.0.1"},
       "generator_files": {"speculators/config.py": "cc" * 32,
                           "speculators/data_generation/vllm_hidden_states_generator.py": "aa" * 32,
                           "speculators/data_generation/custom_worker.py": "bb" * 32}}
#: what `compat confirm --model M` writes on CPU with its defaults (reference hf, float32, automatic bound)
FULL = {"verdict": "OK", "reference": "hf", "dtype": "float32", "device_type": "cpu", "rtol": 1e-3,
        "precision": {"rtol": 1e-3, "source": "auto"}, "depth": 4, "layers": [0, 1, 2, 3],
        "calls_requested": [1, 11, 33, 11], "invariant_calls": {"batch": 4, "repeat": 5}, "confirmed": NOW}


def run_check(tmp_path, doc, **kwargs):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    out = io.StringIO()
    return check(str(path), now=NOW, out=out, **kwargs), out.getvalue()


def test_a_full_strength_report_passes(tmp_path):
    assert weaknesses(FULL) == []
    code, out = run_check(tmp_path, FULL)
    assert code == 0 and "full strength" in out


@pytest.mark.parametrize("change, needle", [
    ({"reference": "none"}, "reference 'none': no layer was compared"),
    ({"rtol": 1000.0, "precision": {"rtol": 1000.0, "source": "--rtol"}}, "bound 1000 (--rtol) is looser than"),
    ({"layers": [2]}, "layers [2]: not every layer of the model's 4"),
    ({"calls_requested": [1, 3]}, "calls [1, 3]: not the default 1,11,33,11"),
    ({"depth": None}, "does not say the model's depth"),
    ({"invariant_calls": None}, "no invariant calls"),
    # a bf16 report judged with the bound against HF while its reference ran the same engine
    ({"reference": "vllm-extract", "dtype": "bfloat16", "rtol": 0.2, "precision": {"rtol": 0.2, "source": "auto"}},
     "bound 0.2 (the bound of the kit that wrote it) is looser than this kit's automatic bound"),
])
def test_each_weakness_is_named_and_exits_1(tmp_path, change, needle):
    code, out = run_check(tmp_path, {**FULL, **change})
    assert code == 1 and needle in out and "weaker than the gate asks" in out, out


def test_the_issues_report_lists_all_three_weaknesses(tmp_path):
    """--reference none, --rtol 1000, one layer: what today's --check certified."""
    doc = {**FULL, "reference": "none", "rtol": 1000.0, "precision": {"rtol": 1000.0, "source": "--rtol"},
           "layers": [1]}
    assert len(weaknesses(doc)) == 3
    assert run_check(tmp_path, doc)[0] == 1


def test_a_stricter_bound_is_not_weaker():
    assert weaknesses({**FULL, "rtol": 1e-4, "precision": {"rtol": 1e-4, "source": "--rtol"}}) == []


def test_accept_weaker_certifies_but_still_names_the_weaknesses(tmp_path):
    code, out = run_check(tmp_path, {**FULL, "layers": [0]}, accept_weaker=True)
    assert code == 0 and "weaker: layers [0]" in out and "accepted weaker: 1 item(s)" in out


def test_accept_weaker_never_certifies_another_install_or_a_wrong_report(tmp_path):
    other = {**NOW, "fingerprint": "0" * 16}
    assert run_check(tmp_path, {**FULL, "confirmed": other}, accept_weaker=True)[0] == 1
    assert run_check(tmp_path, {**FULL, "verdict": "WRONG"}, accept_weaker=True)[0] == 1


def test_the_tie_covers_speculators_config_which_the_kit_patches():
    """Upstream fact: the transformers-5 annotation patch (p03) edits speculators/config.py."""
    files = patched_files()
    assert "speculators/config.py" in files
    assert {"speculators/data_generation/vllm_hidden_states_generator.py",
            "speculators/data_generation/custom_worker.py"} <= set(files)


def test_a_report_that_does_not_cover_a_patched_file_is_not_certified(tmp_path):
    """A report of the kit as landed hashed two files only: config.py could change under it unseen."""
    old = {**NOW, "generator_files": {k: v for k, v in NOW["generator_files"].items() if k != "speculators/config.py"}}
    code, out = run_check(tmp_path, {**FULL, "confirmed": old})
    assert code == 1 and "speculators/config.py: the report does not cover this file" in out
