"""docs/gpu/self-reference-h200.md from the H200 records of ``--reference self`` (docs/records/self-reference/h200/).

usage: python -m ci.gpu.self_page [--check]    (--check: exit 1 when the committed page differs)

Why generated: every figure on a page comes from a record with its commit, suite and device; the twin's verdict is
shown twice, as the run judged it and under today's bound (compat.shared.tolerance), so a bound that moved after a
run is visible rather than rewritten.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HOME, PAGE = ROOT / "docs" / "records" / "self-reference" / "h200", ROOT / "docs" / "gpu" / "self-reference-h200.md"
ORDER = ("k13-left-out-self", "k13-left-out-hf", "applied-none-float32", "applied-hf-float32", "applied-self-float32",
         "applied-self-bfloat16", "k4-left-out-self")


def _records() -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(HOME.glob("*.json"))}


def _worst(check: dict | None, key: str = "worst") -> str:
    if not check:
        return ""
    if key == "max_abs_diff":
        return f"{check['max_abs_diff']:.3g} ({check.get('compared')} logprobs)"
    value = f"{max(check[key].values()):.3g}"
    return value + (f" ({check['bit_equal_files']} of {check['files']} files bit-equal)" if "bit_equal_files" in check else "")


def twin_today(record: dict) -> str:
    """The twin's verdict under today's bound for the record's dtype on CUDA."""
    from compat.shared.tolerance import choose

    twin = record.get("checks", {}).get("twin")
    if not twin:
        return ""
    bound = choose(record["options"]["dtype"], "cuda", reference="twin")
    ok = max(twin["worst"].values()) <= bound.rtol
    return f"{'ok' if ok else 'FAILED'} (<= {bound.rtol:g}, {bound.precision})"


def verdict_today(record: dict) -> str:
    checks = record.get("checks", {})
    if record["verdict"] == "ERROR" or not checks:
        return record["verdict"]
    failed = [k for k, c in checks.items() if not (c.get("ok") if k != "twin" else twin_today(record).startswith("ok"))]
    return "WRONG" if failed else "OK"


def p6(records: dict[str, dict]) -> list[str]:
    """The reference's own time inside its run, as a multiple of that run's engine start (benchmarks/
    self_reference_cost.py's rule: prompts served again alone plus the checks beyond none's)."""
    base = records["applied-none-float32"]["timings"]["checks_s"]
    lines = []
    for ref in ("hf", "self"):
        rec = records[f"applied-{ref}-float32"]
        t = rec["timings"]
        extra = (t.get("twins_s", 0.0) + t["checks_s"] - base) / t["server_start_s"]
        line = (f"- `--reference {ref}`: the whole run {t['total_s']} s = {t['total_s'] / t['server_start_s']:.2f} "
                f"engine starts ({t['server_start_s']} s); the reference's own time {extra:.3f} engine starts")
        recompute = rec["checks"].get("recompute")
        if recompute:
            line += (f"; the recompute read {recompute['weight_bytes_read']} of {recompute['checkpoint_bytes']} weight "
                     f"bytes ({recompute['share_read']:.1%}: under the 64 MiB floor the tiny checkpoint is read whole)")
        lines.append(line + f" (`{rec['name']}.json`)")
    none = records["applied-none-float32"]["timings"]
    lines.append(f"- `--reference none`: {none['total_s']} s = {none['total_s'] / none['server_start_s']:.2f} engine "
                 f"starts (`applied-none-float32.json`)")
    return lines


def render() -> str:
    records = _records()
    first = records[ORDER[0]]
    out = [
        "# `--reference self` on an H200 (generated: `python -m ci.gpu.self_page`; do not edit)", "",
        f"Records: `docs/records/self-reference/h200/` (commit {first['commit'][:7]}, suite {first['suite']}, "
        f"device {first['device']}, versions {json.dumps(first['versions'])}). Model: the tiny Llama with spread "
        "norms and an untied head (`ci/gpu/serve.sh llama-spread`), ids 1-4; K4's: the tiny DeepSeek-V3 with INT4 "
        "experts (Kimi-K2.5's decoder). Each run is `compat confirm --path serve` after `compat apply` "
        "(`ci/gpu/serve.sh model` / `selfcost`).", "",
        "| record | reference | dtype | verdict (run) | verdict (today's bounds) | logprobs max abs | twin worst | "
        "twin today | recompute worst | HF rows worst | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in ORDER:
        rec = records[name]
        checks, opts = rec.get("checks", {}), rec["options"]
        reason = "" if rec["verdict"] != "ERROR" else rec["reason"].splitlines()[0][:110]
        out.append(f"| `{name}` | {opts['reference']} | {opts['dtype']} | {rec['verdict']} | {verdict_today(rec)} | "
                   f"{_worst(checks.get('logprobs'), 'max_abs_diff')} | {_worst(checks.get('twin'))} | "
                   f"{twin_today(rec)} | {_worst(checks.get('recompute'))} | {_worst(checks.get('hf_rows'))} | "
                   f"{reason or rec.get('note', '')} |")
    out += ["", "## P6 on the H200 (float32, the same tree and patches, one run each after a warm-up)", "", *p6(records),
            "", "Raw output: `docs/benchmarks/self_reference_cost_h200.txt`.", ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text = render()
    if "--check" in argv:
        return 0 if PAGE.is_file() and PAGE.read_text() == text else 1
    PAGE.write_text(text)
    print(PAGE)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
