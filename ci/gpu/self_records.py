"""Keep a device's ``compat confirm --path serve`` reports as records the docs can cite.

    python -m ci.gpu.self_records OUT_DIR/confirm_x.json NAME --stamp OUT_DIR/stamp.json --commit SHA [--note ...]

Why: the device gives back the confirm's own JSON report; a page may only cite a figure whose record names its
commit (the tree that ran: serve.sh's packed src.commit), its suite hash (the device stamp's, which identifies the
tree), the device and the versions.  Written to ``docs/records/self-reference/h200/NAME.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HOME = ROOT / "docs" / "records" / "self-reference" / "h200"


def keep(report: Path, name: str, stamp: Path, commit: str, device: str, versions: dict, note: str = "") -> Path:
    doc = json.loads(report.read_text())
    suite = json.loads(stamp.read_text()).get("suite")
    record = {"name": name, "commit": commit, "suite": suite, "lane": "gpu-serve", "device": device,
              "versions": versions, "source": str(report.name), **({"note": note} if note else {}), **doc}
    HOME.mkdir(parents=True, exist_ok=True)
    path = HOME / f"{name}.json"
    path.write_text(json.dumps(record, indent=1, default=str) + "\n")
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("name")
    parser.add_argument("--stamp", type=Path, required=True)
    parser.add_argument("--commit", required=True)
    parser.add_argument("--device", default="cuda (NVIDIA H200)")
    parser.add_argument("--versions", required=True, help="JSON object of the device's versions")
    parser.add_argument("--note", default="")
    args = parser.parse_args()
    print(keep(args.report, args.name, args.stamp, args.commit, args.device, json.loads(args.versions), args.note))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
