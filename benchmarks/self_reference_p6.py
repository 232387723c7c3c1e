"""P6 from one GPU run: what ``--reference self``'s recompute costs against one model load, measured at Kimi-K2.5's
real widths and projected to its 61 layers.

    python benchmarks/self_reference_p6.py REPORT.json [REPORT.json ...]

Each REPORT is a ``compat confirm --path serve --reference self --json-file`` report of a run on the GPU (the
real-width checkpoint, ``fixtures/tiny_int4.py --real-widths``: hidden 7168, 64 heads, INT4 experts).  Both figures
come from that one run: the server's start (``timings.server_start_s``: one model load of that checkpoint, weights
and warm-up) and the recompute (``checks.recompute``: its seconds, the weight bytes it read, the device).

The projection to Kimi-K2.5 scales each figure by bytes, from its published shapes
(``benchmarks/self_reference_kimi_plan.py``'s index): the recompute reads every layer up to the last id once, so
its time is taken as proportional to the bytes it reads (read, dequantize, run); the model load reads every byte
of the checkpoint, so its time is taken as proportional to the checkpoint's bytes.  Both proportionalities are
assumptions, said here and printed; the ratio at the measured width needs none.  Goal (P6): the recompute under a
tenth of one model load in wall time.  Prints, never asserts.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

GOAL = 0.1


def kimi_bytes(last_id: int = 61) -> tuple[int, int]:
    """(bytes the chain reads to id ``last_id``: embedding + layers 0..last_id-1, the checkpoint's bytes)."""
    from self_reference_kimi_plan import kimi_index

    index, _ = kimi_index()
    chain = sum(index.layer_bytes(i) for i in range(last_id)) + index.sizes[index.named("embed_tokens.weight")]
    return chain, index.total_bytes


def report_lines(path: Path) -> list[str]:
    doc = json.loads(path.read_text())
    check = doc.get("checks", {}).get("recompute") or {}
    start = (doc.get("timings") or {}).get("server_start_s")
    seconds, read = check.get("seconds"), check.get("weight_bytes_read")
    if not (start and seconds and read):
        return [f"{path}: no recompute seconds, bytes or server start in the report (verdict {doc.get('verdict')}): "
                f"nothing measured"]
    confirmed = doc.get("confirmed") or {}
    stamps = sorted(path.parent.glob("stamp*.json"))  # the GPU lane's stamp of the commit that ran, beside the report
    commit = confirmed.get("kit_commit") or (json.loads(stamps[0].read_text()).get("commit") if stamps else None)
    rate = read / seconds
    chain, total = kimi_bytes()
    recompute_kimi = chain / rate
    load_kimi = start * total / max(check.get("checkpoint_bytes") or read, 1)
    lines = [
        f"{path.name}: verdict {doc.get('verdict')}, device {check.get('device')}, commit "
        f"{commit or 'unknown'}, model {confirmed.get('model') or 'not in this report (written before reports named it)'}",
        f"  measured: server start (one model load) {start:.1f} s; recompute {seconds:.1f} s over "
        f"{check.get('layers_run')} layers, {check.get('tokens')} tokens, {read / 1e9:.2f} GB read "
        f"({rate / 1e9:.2f} GB/s)",
        f"  measured ratio recompute / model load: {seconds / start:.3f} (goal <= {GOAL})",
        f"  Kimi-K2.5 (61 layers, published shapes): the chain reads {chain / 1e9:.1f} GB of {total / 1e9:.1f} GB",
        f"  projected, by bytes: recompute {recompute_kimi:.0f} s; model load {load_kimi:.0f} s; ratio "
        f"{recompute_kimi / load_kimi:.3f} -> P6 {'met' if recompute_kimi / load_kimi <= GOAL else 'NOT met'}",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    paths = [Path(p) for p in (argv if argv is not None else sys.argv[1:])]
    if not paths:
        print(__doc__)
        return 2
    for path in paths:
        print("\n".join(report_lines(path)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
