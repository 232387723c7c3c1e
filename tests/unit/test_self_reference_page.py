"""docs/serve-self-reference.md: every result it quotes comes from a record or benchmark output.

The page's result tables and paragraphs sit between markers and are rendered by ``python -m ci.self_reference_page``;
the committed page must equal the render, so a hand edit fails.  Independently of the renderer, every figure of a
generated line (a table row or a paragraph; outside code spans, where paths and ids are names) is looked up in the
files that line names in code spans; the detection table's statuses and verdicts are derived again from each
record's checks by the rule the verdicts are defined by (below, not the renderer's code); the rule "no row has self
OK where HF says WRONG" is checked on the page's tables and on the records themselves; and the records and the
Kimi-K2.5 benchmark output are checked to hold what the page says of them (every step of the chain ran, every layer
is read).
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


def outcome(check: dict) -> str:
    """A check's cell by the verdicts' definition: FAIL where a comparison failed (``failed_comparisons``, or not ok
    with nothing said not looked at), INCOMPLETE where a part did not look at all it claims and nothing failed."""
    if check.get("failed_comparisons") or (check.get("ok") is False and not check.get("not_looked_at")):
        return "FAIL"
    return "INCOMPLETE" if check.get("not_looked_at") else "ok"


def verdict_of(checks: dict, parts) -> str:
    cells = {outcome(checks[p]) for p in parts if p in checks}
    if not cells:
        return "not run"
    return "WRONG" if "FAIL" in cells else "INCOMPLETE" if "INCOMPLETE" in cells else "OK"


def fault_records(root: Path = ROOT) -> dict[str, dict]:
    return {p.relative_to(root / page.HOME).as_posix(): json.loads(p.read_text())
            for p in (root / page.HOME).glob("*/*fault-*.json")}


def fault_table_disagreements(block: str, root: Path = ROOT) -> list[str]:
    """Where the detection table says other than the records: a check's cell, the verdicts, the depth, a record
    missing; the shallow suite's ``failed`` list and the depth corpus's own ``verdict`` checked too."""
    rows = {r["record"].strip("`"): r for r in table(block)}
    found = fault_records(root)
    bad = [f"no row for {name}" for name in found if name not in rows]
    for name, row in rows.items():
        doc = found.get(name)
        if doc is None:
            bad.append(f"{name}: no such record")
            continue
        checks = doc["checks"]
        for part in ("logprobs", "twin", "recompute", "files"):
            want = outcome(checks[part]) if part in checks else "not run"
            if row[part] != want:
                bad.append(f"{name} {part}: {row[part]} where the record says {want}")
        # the file check is both references': it counts for one only where that reference's own parts ran
        self_ran = any(p in checks for p in ("logprobs", "twin", "recompute"))
        self_says = verdict_of(checks, ("files", "logprobs", "twin", "recompute")) if self_ran else "not run"
        hf_says = verdict_of(checks, ("files", "hf_rows")) if "hf_rows" in checks else "not run"
        if (row["self says"], row["HF says"]) != (self_says, hf_says):
            bad.append(f"{name}: says {row['self says']}/{row['HF says']}, records {self_says}/{hf_says}")
        if "failed" in doc and {p for p in checks if outcome(checks[p]) == "FAIL"} != set(doc["failed"]):
            bad.append(f"{name}: its failed list {doc['failed']} is not its failed checks")
        if "verdict" in doc and doc["verdict"] != self_says:
            bad.append(f"{name}: the run's verdict {doc['verdict']} is not {self_says}")
        depth = doc.get("depth") or checks["recompute"]["layers_run"]
        if not row["depth"].startswith(f"{depth} ("):
            bad.append(f"{name}: depth {row['depth']} where the record's is {depth}")
    return bad


@pytest.mark.parametrize("block, figure, edited", [("serve-runs", "8.88 (16 of 44)", "8.98 (16 of 44)"),
                                                   ("p6", "0.242 for `self`", "0.142 for `self`"),
                                                   ("kimi-chain", "591.9 GB", "519.9 GB"),
                                                   ("faults", "`59->61` (9.04)", "`59->61` (7.04)"),
                                                   ("faults", "3->30 (29%)", "3->30 (19%)"),
                                                   ("norm-spread", "0.00023", "0.0023")])
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


def test_the_fault_table_says_what_each_record_says():
    """Each cell and verdict derived again from the record's checks; both suites present, the depth corpus at
    Kimi-K2.5's depth with every fault of its corpus."""
    block = committed()["faults"]
    assert not fault_table_disagreements(block)
    rows = table(block)
    depths = {r["depth"].split(" ")[0] for r in rows}
    assert depths == {"4", "61"}, depths
    assert len([r for r in rows if r["depth"].startswith("4 ")]) >= 10
    assert len([r for r in rows if r["depth"].startswith("61 ")]) >= 6


def test_every_fault_is_caught_and_right_files_are_ok():
    """No fault of either suite is OK; the right files are OK at both depths."""
    for row in table(committed()["faults"]):
        if row["fault"] == "none":
            assert row["self says"] == "OK" and row["HF says"] in ("OK", "not run"), row
        else:
            assert row["self says"] in ("WRONG", "INCOMPLETE"), row


@pytest.mark.parametrize("cell, edited", [("| WRONG | not run | `serve/depth-fault-final-id-x3.json` |",
                                           "| OK | not run | `serve/depth-fault-final-id-x3.json` |"),
                                          ("| FAIL | INCOMPLETE | FAIL |", "| FAIL | ok | FAIL |")])
def test_a_hand_edited_status_fails_the_table_check(tmp_path, cell, edited):
    """Mutation: a verdict or a status changed by hand (words, which the figure check cannot see)."""
    text = (ROOT / page.PAGE).read_text()
    block = committed()["faults"]
    assert block.count(cell) == 1, cell
    mutated = block.replace(cell, edited)
    assert fault_table_disagreements(mutated)
    (tmp_path / page.PAGE).parent.mkdir(parents=True)
    (tmp_path / page.PAGE).write_text(text.replace(block, mutated))
    for folder in (page.HOME, page.BENCH):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    assert page.write(check=True, root=tmp_path) == 1


def test_the_page_reads_statuses_as_confirm_does():
    """The renderer takes a check's status from the runner; the definition above gives the same on every record."""
    from compat.serve.runner import status

    word = {"ok": "ok", "wrong": "FAIL", "incomplete": "INCOMPLETE"}
    for path in HOME.glob("*/*.json"):
        for name, check in (json.loads(path.read_text()).get("checks") or {}).items():
            assert word[status(check)] == outcome(check), (path, name)


def test_every_step_of_the_chain_ran_in_the_fault_records():
    """The chain: the embedding to the first id, then each id to the next, every layer up to the last id run."""
    for name, doc in fault_records().items():
        recompute = doc["checks"]["recompute"]
        ends = [int(step.split("->")[1]) for step in recompute["steps"]]
        starts = ["embedding", *map(str, ends[:-1])]
        assert recompute["steps"] == [f"{a}->{b}" for a, b in zip(starts, ends)], name
        assert recompute["layers_run"] == ends[-1] == (doc.get("depth") or ends[-1]), name
        assert "not_recomputed" not in recompute, name


def test_records_before_the_chain_left_no_step_out():
    """The page says the older runs' planner ran every step: their ``not_recomputed`` is empty in each."""
    older = [p for p in HOME.glob("*/*.json")
             if "not_recomputed" in (json.loads(p.read_text()).get("checks") or {}).get("recompute", {})]
    assert older
    for path in older:
        assert json.loads(path.read_text())["checks"]["recompute"]["not_recomputed"] == [], path


def test_the_kimi_benchmark_reads_every_layer_once():
    """What the page says of Kimi-K2.5's chain, checked on the benchmark's output itself: its steps are contiguous
    from the embedding to the last id, their layers are every layer of the model once, and the bytes add up."""
    text = (ROOT / page.BENCH / "self_reference_kimi_plan.txt").read_text()
    total, depth = re.search(r"text weights: ([\d.]+) GB; (\d+) layers", text).groups()
    captured = [int(x) for x in re.search(r"captured by --reference self: \[(.*)\]", text).group(1).split(", ")]
    steps = re.findall(r"^\s+step (\S+): (\d+) layers? \((\d+)(?:-(\d+))?\), ([\d.]+) GB", text, re.M)
    assert [s[0] for s in steps] == [f"{a}->{b}" for a, b in zip(["embedding", *map(str, captured[:-1])], captured)]
    layers = [i for _, _, first, last, _ in steps for i in range(int(first), int(last or first) + 1)]
    assert layers == list(range(int(depth))) and captured[-1] == int(depth)
    read = re.search(r"each of (\d+) layers once \(([\d.]+) GB\) and the embedding \(([\d.]+) GB\): ([\d.]+) GB",
                     text).groups()
    assert int(read[0]) == int(depth)
    assert float(read[1]) == pytest.approx(sum(float(s[4]) for s in steps), abs=0.1)
    assert float(read[3]) == pytest.approx(float(read[1]) + float(read[2]), abs=0.1)
    assert float(read[3]) <= float(total)


def test_the_p6_block_quotes_no_real_width_figure_before_its_record():
    """The real-width GPU measurement is marked pending, and that line holds no figure."""
    line = next(x for x in lines_of(committed()["p6"]) if "real width" in x)
    assert "not measured yet" in line and not FIGURE.findall(CODE.sub("", line)), line


def test_no_row_has_self_ok_where_hf_says_wrong():
    blocks = committed()
    rows = [r for name in ("faults", "serve-runs", "leave-one-out") for r in table(blocks[name])]
    assert rows and all("self says" in r and "HF says" in r for r in rows)
    assert not [r for r in rows if r["self says"].startswith("OK") and r["HF says"].startswith("WRONG")]


def test_no_record_has_self_ok_where_hf_says_wrong():
    """The same rule on the records, without the page: one run judged both ways, or a pair of runs on one device."""
    def verdict(checks: dict, parts) -> str | None:
        said = verdict_of(checks, parts)
        return None if said == "not run" else said

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
