"""Every result the serve table quotes comes from the record its row names.

The table sits in docs/modern-path.md (``readme.PAGE``).  The block between the
page's markers is regenerated from the records (``python -m ci readme``) and must equal
the committed one, so a hand-edited figure fails.  Independently of the renderer, every figure a row quotes
(outside code spans: paths, patch ids and commits are names, not figures) is looked up in the record that row
names; a row that names no record quotes no figure.  A lane whose proofs no cell records (serve-k2) must save its
own records, or it could never have a row.
"""

from __future__ import annotations

import ast
import json
import math
import re
import shutil
from pathlib import Path

import pytest

from tests.unit.figures import figures_of_doc, held

from ci import readme, serve_table

ROOT = Path(__file__).resolve().parents[2]
FIGURE = re.compile(r"\d+(?:\.\d+)*(?:e[+-]?\d+)?")
CODE = re.compile(r"`[^`]*`")


def rows(block: str) -> list[list[str]]:
    """The table's body rows, as cells (a ``\\|`` inside a cell is no separator)."""
    lines = [line for line in block.splitlines() if line.startswith("|")][2:]
    return [[cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines]


def figures_in(text: str) -> list[str]:
    return FIGURE.findall(CODE.sub("", text))


def figures_of(doc: dict) -> tuple[set[str], list[float]]:
    """Every figure a record holds: its strings' figures, its numbers, and its tests' tallies per outcome."""
    words, numbers = figures_of_doc(doc, FIGURE)
    outcomes = [t.get("outcome") for t in doc.get("tests") or []]
    numbers += [float(outcomes.count(o)) for o in ("passed", "skipped")]
    numbers.append(float(sum(o not in ("passed", "skipped") for o in outcomes)))
    return words, numbers



def unheld(block: str, root: Path = ROOT) -> list[str]:
    """Each figure of a row that the record it names does not hold (a row naming none: every figure)."""
    bad = []
    for cells in rows(block):
        where, says = cells[4], cells[5]
        named = CODE.fullmatch(where)
        doc = json.loads((root / where.strip("`")).read_text()) if named else {}
        words, numbers = figures_of(doc)
        bad += [f"{where}: {f}" for f in figures_in(says) if not held(f, words, numbers)]
    return bad


def committed() -> str:
    return readme.block(readme.PAGE.read_text())


def test_the_readme_block_is_what_the_records_give():
    assert committed() == serve_table.render(), "the serve block is stale or edited: run python -m ci readme"


def test_every_figure_in_the_block_is_in_the_record_its_row_names():
    assert rows(committed()), "the block has no rows"
    assert not unheld(committed())


def test_a_hand_edited_figure_fails_both_checks():
    """Mutation: one digit of a quoted figure changed, as a hand edit would."""
    block = committed()
    row = next(line for line in block.splitlines() if " passed, " in line)
    cells = next(c for c in rows(block) if " passed, " in c[5])
    passed = re.search(r"(\d+) passed, ", row).group(1)
    words, numbers = figures_of(json.loads((ROOT / cells[4].strip("`")).read_text()))
    # a count that no figure of the record rounds to, however large (a byte count, a duration)
    near = numbers + [float(w) for w in words if w.count(".") <= 1]
    beyond = max(abs(n) for n in near if math.isfinite(n))
    edited = block.replace(row, row.replace(f"{passed} passed, ", f"{int(beyond * 10) + 987654} passed, ", 1))
    assert edited != serve_table.render()
    assert unheld(edited), "a figure no record holds went unnoticed"


def test_every_row_names_a_record_or_says_not_run_yet():
    for cells in rows(committed()):
        assert CODE.fullmatch(cells[4]) or (cells[4], cells[5]) == ("no record", "not run yet"), cells
        if CODE.fullmatch(cells[4]):
            assert (ROOT / cells[4].strip("`")).is_file(), cells[4]


def test_without_records_every_lane_says_not_run_yet(tmp_path):
    (tmp_path / serve_table.CELLS).mkdir(parents=True)
    block = serve_table.render(tmp_path)
    body = rows(block)
    assert {c[0] for c in body if c[0]} == {f"`{lane.name}`" for lane in serve_table.serve_lanes()}
    assert all(c[4:] == ["no record", "not run yet"] for c in body), block
    assert not unheld(block, tmp_path)


def test_a_saved_proof_record_makes_a_row_with_its_figures(tmp_path):
    """serve-k2's proofs save ``k2-left-out`` and ``k2-applied``: once taken into the docs, each is a row."""
    (tmp_path / serve_table.CELLS).mkdir(parents=True)
    lane = tmp_path / serve_table.SAVED / "serve-k2"
    lane.mkdir(parents=True)
    base = {"commit": "ab" * 20, "date": "2026-12-03T10:00:00Z", "lane": "serve-k2", "bound": 1e-05}
    (lane / "k2-left-out.json").write_text(json.dumps(
        {**base, "name": "k2-left-out", "verdict": "WRONG", "reason": "shape (7, 128, 128) where HF's is (7, 3, 128)"}))
    (lane / "k2-applied.json").write_text(json.dumps(
        {**base, "name": "k2-applied", "verdict": "OK", "rows": {"1": 1.25e-06, "4": 3.5e-06}}))
    block = serve_table.render(tmp_path)
    said = [c[5] for c in rows(block) if "serve-k2/" in c[4]]
    assert said[0].startswith("`hs_connectors.serve.kv_layout` left out: WRONG, as the proof expects"), said
    assert "worst row 3.50e-06 (bound 1e-05)" in said[1], said
    assert not unheld(block, tmp_path)
    (lane / "k2-applied.json").write_text(json.dumps({**base, "name": "k2-applied", "verdict": "WRONG"}))
    assert "**not** what the proof expects" in serve_table.render(tmp_path)


def test_take_copies_only_the_proof_records_of_the_lane(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    runs = cache / "serve-runs" / "records" / "serve-k2"
    runs.mkdir(parents=True)
    for name in ("k2-left-out", "k14-left-out", "fault-none"):
        (runs / f"{name}.json").write_text("{}")
    monkeypatch.setenv("SPECDEC_COMPAT_CACHE", str(cache))
    copied = readme.take("serve-k2", tmp_path / "repo")
    assert sorted(p.name for p in copied) == ["k14-left-out.json", "k2-left-out.json"]
    assert all(p.parent == tmp_path / "repo" / serve_table.SAVED / "serve-k2" for p in copied)


def test_check_fails_on_an_edited_page_and_write_mends_it(tmp_path):
    page = tmp_path / readme.PAGE.relative_to(ROOT)
    page.parent.mkdir(parents=True)
    shutil.copy(readme.PAGE, page)
    shutil.copytree(ROOT / serve_table.CELLS, tmp_path / serve_table.CELLS)
    shutil.copytree(ROOT / serve_table.SAVED, tmp_path / serve_table.SAVED)
    text = page.read_text()
    page.write_text(text.replace(" passed, ", " passed,  ", 1))
    assert readme.write(check=True, root=tmp_path) == 1
    assert readme.write(root=tmp_path) == 0 and readme.write(check=True, root=tmp_path) == 0
    assert page.read_text() == text


def test_the_readme_links_the_page_that_holds_the_table():
    assert readme.PAGE == ROOT / "docs" / "modern-path.md" and readme.BEGIN not in (ROOT / "README.md").read_text()
    assert "](docs/modern-path.md)" in (ROOT / "README.md").read_text()


def test_lanes_that_are_no_cell_save_a_record_in_each_proof_they_run():
    """No cell record holds serve-k2's outcome, so each of its proof tests must call ``records.save``."""
    from fixtures import lanes

    modules, _ = serve_table.proof_ids()
    checked = 0
    for lane in (item for item in lanes.LANES.values() if item.name.startswith("serve") and not item.cell):
        for path in (a for a in lane.tests if a in modules):
            tree = ast.parse((ROOT / path).read_text())
            for test in (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")):
                saves = [c for c in ast.walk(test) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                         and c.func.attr == "save" and getattr(c.func.value, "id", "") == "records"]
                names = [c.args[0].value for c in saves if c.args and isinstance(c.args[0], ast.Constant)]
                assert names and all(serve_table.PROOF_RECORD.match(n) for n in names), (path, test.name, names)
                checked += 1
    assert checked >= 3, checked


@pytest.mark.parametrize("mangled", ["", readme.BEGIN, readme.END + "\n" + readme.BEGIN])
def test_missing_or_misordered_markers_are_an_error(mangled):
    with pytest.raises(readme.MarkerError):
        readme.block("text\n" + mangled + "\nmore\n")
