"""Issue 29.9 on docs/serve-self-reference.md: every result it quotes comes from a record or benchmark output.

The page's result tables and paragraphs sit between markers and are rendered by ``python -m ci.self_reference_page``;
the committed page must equal the render, so a hand edit fails.  Independently of the renderer, every figure of a
generated line (a table row or a paragraph; outside code spans, where paths and ids are names) is looked up in the
files that line names in code spans, and the rule "no row has self OK where HF says WRONG" is checked on the
page's tables and on the records themselves.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.unit.figures import figures_of_doc, held

from ci import self_reference_page as page

ROOT = Path(__file__).resolve().parents[2]
HOME = ROOT / page.HOME
#: a figure on the page: a number not glued to a name (K13, x3, Kimi-K2.5, float32, k+1 are names)
FIGURE = re.compile(r"(?<![\w.+])\d+(?:\.\d+)*(?:e[+-]?\d+)?")
#: a figure a source holds: any number in it
HELD = re.compile(r"\d+(?:\.\d+)*(?:e[+-]?\d+)?")
CODE = re.compile(r"`([^`]*)`")


def committed() -> dict[str, str]:
    return page.blocks((ROOT / page.PAGE).read_text())


def sources(line: str, root: Path = ROOT) -> list[Path]:
    """The files a line names in code spans: under docs/records/self-reference/, else under the repository."""
    found = []
    for name in CODE.findall(line):
        for base in (root / page.HOME, root):
            if name and (base / name).is_file():
                found.append(base / name)
                break
    return found


def figures_of(path: Path) -> tuple[set[str], list[float]]:
    """Every figure a file holds: a record's numbers and the figures in its strings (not its commit's hex)."""
    if path.suffix != ".json":
        return set(HELD.findall(path.read_text())), []
    return figures_of_doc(json.loads(path.read_text()), HELD, skip=("commit",))



def lines_of(block: str) -> list[str]:
    """A block's lines that state something: its paragraphs and list items, and its tables' body rows."""
    out, table = [], 0
    for line in block.splitlines():
        table = table + 1 if line.startswith("|") else 0
        if line.strip() and table not in (1, 2):
            out.append(line)
    return out


def unheld(blocks: dict[str, str], root: Path = ROOT) -> list[str]:
    """Each figure of a generated line that no file the line names holds (a line naming none: every figure)."""
    bad = []
    for name, block in blocks.items():
        for line in lines_of(block):
            words, numbers = set(), []
            for path in sources(line, root):
                w, n = figures_of(path)
                words |= w
                numbers += n
            bad += [f"{name}: {f} in {line[:90]!r}" for f in FIGURE.findall(CODE.sub("", line))
                    if not held(f, words, numbers)]
    return bad


def table(block: str) -> list[dict[str, str]]:
    """A generated table's body rows as {header: cell}."""
    rows = [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in block.splitlines()
            if line.startswith("|")]
    return [dict(zip(rows[0], row)) for row in rows[2:]]


def test_the_committed_page_is_what_the_records_give():
    assert page.write(check=True) == 0, "the page is stale or edited by hand: python -m ci.self_reference_page"


def test_every_figure_is_in_the_files_its_line_names():
    blocks = committed()
    assert all(lines_of(b) for b in blocks.values()), blocks
    assert not unheld(blocks)


@pytest.mark.parametrize("block, figure, edited", [("serve-runs", "8.88 (16 of 44)", "8.98 (16 of 44)"),
                                                   ("p6", "0.242 for `self`", "0.142 for `self`"),
                                                   ("kimi-plan", "42.6 GB", "32.6 GB")])
def test_a_hand_edited_figure_fails_both_checks(tmp_path, block, figure, edited):
    """Mutation: one figure changed by hand, as an edit of the page would."""
    text = (ROOT / page.PAGE).read_text()
    blocks = committed()
    assert blocks[block].count(figure) == 1, figure
    mutated = text.replace(blocks[block], blocks[block].replace(figure, edited))
    assert unheld(page.blocks(mutated)), "a figure no record holds went unnoticed"
    (tmp_path / page.PAGE).parent.mkdir(parents=True)
    (tmp_path / page.PAGE).write_text(mutated)
    for folder in (page.HOME, page.BENCH):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    assert page.write(check=True, root=tmp_path) == 1
    assert page.write(root=tmp_path) == 0 and (tmp_path / page.PAGE).read_text() == text


def test_every_table_row_names_records_that_exist():
    blocks = committed()
    for name in ("faults", "serve-runs"):
        for row in table(blocks[name]):
            assert any(sources(cell) for cell in row.values()), (name, row)
    rows = table(blocks["leave-one-out"])
    assert all(sources(r["records"]) for r in rows if r["records"].startswith("`")), rows


def test_every_record_of_a_run_is_on_the_page():
    """A record taken into docs/records/self-reference/ gets a row; none is left off."""
    text = "".join(committed().values())
    for path in HOME.glob("*/*.json"):
        doc = json.loads(path.read_text())
        if "fault" in doc or (path.parent.name.startswith("serve") and "checks" in doc) or \
                page.LEFT_OUT.match(path.stem):
            assert f"`{path.relative_to(HOME).as_posix()}`" in text, path


def test_the_fault_table_says_what_each_record_failed():
    """Read from each record's ``failed`` list (the renderer reads the checks' ``ok``): both must agree."""
    rows = {r["record"].strip("`"): r for r in table(committed()["faults"])}
    assert len(rows) == len(list(HOME.glob("*/fault-*.json"))) >= 9
    for name, row in rows.items():
        failed = set(json.loads((HOME / name).read_text())["failed"])
        for part in ("logprobs", "twin", "recompute", "files"):
            assert row[part] == ("FAIL" if part in failed else "ok"), (name, part)
        assert row["self says"] == ("WRONG" if failed & {"files", "logprobs", "twin", "recompute"} else "OK"), name
        assert row["HF says"] == ("WRONG" if failed & {"files", "hf_rows"} else "OK"), name
        assert row["self says"] == ("OK" if name.endswith("fault-none.json") else "WRONG"), name


def test_no_row_has_self_ok_where_hf_says_wrong():
    blocks = committed()
    rows = [r for name in ("faults", "serve-runs", "leave-one-out") for r in table(blocks[name])]
    assert rows and all("self says" in r and "HF says" in r for r in rows)
    assert not [r for r in rows if r["self says"].startswith("OK") and r["HF says"].startswith("WRONG")]


def test_no_record_has_self_ok_where_hf_says_wrong():
    """The same rule on the records, without the page: one run judged both ways, or a pair of runs on one device."""
    def verdict(checks: dict, parts) -> str | None:
        ran = [p for p in parts if p in checks]
        return None if not ran else "WRONG" if any(not checks[p]["ok"] for p in ran) else "OK"

    pairs = 0
    for path in HOME.glob("*/*.json"):
        checks = json.loads(path.read_text()).get("checks") or {}
        hf, self = verdict(checks, ("hf_rows",)), verdict(checks, ("logprobs", "twin", "recompute"))
        if hf and self:
            pairs += 1
            assert not (self == "OK" and hf == "WRONG"), path
        if path.stem.endswith("-self") and (path.parent / f"{path.stem[:-5]}-hf.json").is_file():
            other = json.loads((path.parent / f"{path.stem[:-5]}-hf.json").read_text())
            pairs += 1
            assert not (json.loads(path.read_text())["verdict"] == "OK" and other["verdict"] == "WRONG"), path
    assert pairs >= 10, pairs


@pytest.mark.parametrize("name", sorted(page.BLOCKS))
def test_a_missing_block_marker_is_an_error(name):
    text = (ROOT / page.PAGE).read_text().replace(page.BEGIN.format(name), "", 1)
    with pytest.raises(page.MarkerError):
        page.blocks(text)
