"""The surface: every named probe evaluated on one vLLM and one speculators source.

Values and provenance are kept apart: two releases with the same API have
equal ``values`` (and fingerprint) even though their line numbers differ.

CLI::

    python -m compat.surface [--wheel PATH | --sdist PATH | --src PATH] [--json]
    python -m compat.surface diff A B [--json]     # A/B: fixture version, wheel, sdist or tree
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import dists, probe_cache, versions
from .astkit import Reader
from .probes import PROBES, Reading, Unknown
from .sources import InstalledSource, Source, SourceError, open_source

PACKAGES = ("vllm", "speculators", "transformers")
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "surfaces"


@dataclass
class Surface:
    """Probe values for one (vLLM, speculators) pair plus where each was read."""

    packages: dict[str, dict | None] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)  # name -> value | Unknown
    where: dict[str, str] = field(default_factory=dict)

    def value(self, name: str):
        if name not in self.values:
            return Unknown(f"no probe named {name!r} in this surface")
        return self.values[name]

    def unknowns(self) -> dict[str, str]:
        return {k: v.reason for k, v in self.values.items() if isinstance(v, Unknown)}

    def version(self, package: str) -> str | None:
        info = self.packages.get(package)
        return info.get("version") if info else None

    def fingerprint(self) -> str:
        """Hash of the probe values only (not of provenance or versions)."""
        canonical = json.dumps(_values_json(self.values), sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def as_json(self) -> dict:
        return {
            "packages": self.packages,
            "fingerprint": self.fingerprint(),
            "probes": _values_json(self.values),
            "where": self.where,
        }

    @classmethod
    def from_json(cls, data: dict) -> "Surface":
        values = {
            k: Unknown(v["unknown"]) if isinstance(v, dict) and "unknown" in v else v
            for k, v in data.get("probes", {}).items()
        }
        return cls(dict(data.get("packages", {})), values, dict(data.get("where", {})))


def _values_json(values: dict[str, Any]) -> dict:
    return {k: ({"unknown": v.reason} if isinstance(v, Unknown) else v) for k, v in sorted(values.items())}


def _package_info(source: Source, module: str) -> dict:
    info = {"name": source.dist_name, "version": source.version, "kind": source.kind, "location": source.location}
    try:
        info["commit"] = versions.nightly_commit(source.version) if source.version else None
    except ValueError:
        info["commit"] = None
    return info


def evaluate(
    vllm: Source | None, speculators: Source | None, transformers: Source | None = None, only: str | None = None
) -> Surface:
    """Run every probe against its package's source; a missing package makes its probes unknown."""
    surface = Surface()
    for module, source in (("vllm", vllm), ("speculators", speculators), ("transformers", transformers)):
        if only and module != only:
            continue
        surface.packages[module] = _package_info(source, module) if source else None
        names = sorted(n for n, spec in PROBES.items() if spec.package == module)
        if source is None:
            surface.values.update({n: Unknown(f"{module} is not available") for n in names})
            continue
        values, where = _probe_package(module, source, names)
        surface.values.update(values)
        surface.where.update(where)
    surface.values = dict(sorted(surface.values.items()))
    return surface


def _probe_package(module: str, source: Source, names: list[str]) -> tuple[dict, dict]:
    """Probe values (and provenance) of one package; cached for installed ones."""
    cacheable = isinstance(source, InstalledSource)
    if cacheable:
        hit = probe_cache.load(module, source)
        if hit is not None:
            values, where = hit
            return {k: Unknown(v["unknown"]) if isinstance(v, dict) else v for k, v in values.items()}, where
    recording = probe_cache.Recording(source)
    reader = Reader(recording if cacheable else source)
    values, where = {}, {}
    for name in names:
        result = PROBES[name].run(reader)
        if isinstance(result, Reading):
            values[name] = result.value
            if result.where:
                where[name] = result.where
        else:
            values[name] = result
    if cacheable:
        probe_cache.store(module, source, recording, _values_json(values), where)
    return values, where


def installed_sources() -> dict[str, tuple[Any, Source | None]]:
    """module -> (importlib Distribution or None, Source or None) for vllm, speculators, transformers."""
    found = {}
    for module in PACKAGES:
        dist = dists.find_distribution(module)
        found[module] = (dist, InstalledSource(dist) if dist is not None else None)
    return found


def load(spec: str) -> Surface:
    """A surface from a fixture name (``0.16.0`` / ``vllm-0.16.0``), a JSON file, or a source path."""
    path = Path(spec)
    for candidate in (path, FIXTURES / f"{spec}.json", FIXTURES / f"vllm-{spec}.json"):
        if candidate.is_file() and candidate.suffix == ".json":
            try:
                return Surface.from_json(json.loads(candidate.read_text()))
            except (ValueError, KeyError) as exc:
                raise SourceError(f"corrupt surface file {candidate}: {exc}") from exc
    if path.exists():
        return evaluate(open_source(path), None, only="vllm")
    raise SourceError(f"no surface fixture, wheel, sdist or tree named {spec!r}")


def diff(a: Surface, b: Surface) -> dict[str, tuple[Any, Any]]:
    """Probes whose values differ: name -> (old, new)."""
    names = sorted(set(a.values) | set(b.values))
    out = {}
    for name in names:
        old, new = a.values.get(name, "<no probe>"), b.values.get(name, "<no probe>")
        if _show(old) != _show(new):
            out[name] = (old, new)
    return out


def _show(value) -> str:
    return f"unknown ({value.reason})" if isinstance(value, Unknown) else str(value)


def render(surface: Surface) -> str:
    lines = []
    for module, info in surface.packages.items():
        if info is None:
            lines.append(f"{module:12} not installed")
        else:
            commit = f" commit {info['commit']}" if info.get("commit") else ""
            lines.append(f"{module:12} {info['name']} {info['version']}{commit} [{info['kind']}]")
    lines.append(f"fingerprint  {surface.fingerprint()}")
    width = max((len(n) for n in surface.values), default=10)
    for name, value in sorted(surface.values.items()):
        where = surface.where.get(name, "")
        lines.append(f"  {name:{width}}  {_show(value):24} {where}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "diff":
        parser = argparse.ArgumentParser(prog="python -m compat.surface diff")
        parser.add_argument("a")
        parser.add_argument("b")
        parser.add_argument("--json", action="store_true")
        args = parser.parse_args(argv[1:])
        try:
            changes = diff(load(args.a), load(args.b))
        except SourceError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if args.json:
            print(json.dumps({k: {"old": _jsonable(o), "new": _jsonable(n)} for k, (o, n) in changes.items()}, indent=2))
        else:
            if not changes:
                print(f"{args.a} -> {args.b}: no probe changed")
            for name, (old, new) in changes.items():
                print(f"{name}: {_show(old)} -> {_show(new)}")
        return 0
    parser = argparse.ArgumentParser(prog="python -m compat.surface")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--wheel")
    group.add_argument("--sdist")
    group.add_argument("--src")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    path = args.wheel or args.sdist or args.src
    try:
        if path:
            surface = evaluate(open_source(path), None, only="vllm")
        else:
            found = installed_sources()
            surface = evaluate(*(found[m][1] for m in PACKAGES))
    except SourceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(surface.as_json(), indent=2) if args.json else render(surface))
    return 0


def _jsonable(value):
    return {"unknown": value.reason} if isinstance(value, Unknown) else value


if __name__ == "__main__":
    sys.exit(main())
