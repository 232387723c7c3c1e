"""The surface: every named probe evaluated on one vLLM and one speculators source.

Values and provenance are kept apart: two releases with the same API have
equal ``values`` (and fingerprint) even though their line numbers differ.

CLI::

    compat surface [--wheel PATH | --sdist PATH | --src PATH] [--json | --json-file PATH]
    compat surface diff A B [--json | --json-file PATH]   # A/B: release, surface JSON, wheel, sdist or tree

The surfaces of every vLLM release (``compat/surfaces/vllm-<version>.json``,
made by fixtures/make_surfaces.py) ship inside the package, so ``diff`` works
from any directory after ``pip install``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import dists, exit_policy, probe_cache, versions
from .astkit import Reader
from .output import Output
from .probes import PROBES, Reading, Unknown
from .sources import InstalledSource, Source, SourceError, open_source

PACKAGES = ("vllm", "speculators", "transformers")
#: Committed surface of every vLLM release, shipped as package data.
SURFACES = Path(__file__).resolve().parent / "surfaces"
DESCRIPTION = "Show the probes of the installed vLLM/speculators/transformers (or of a wheel); 'diff A B' compares two."


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
    if source.version is None:
        info["unread"] = getattr(source, "unread", None) or "its version could not be read"
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
    recording = probe_cache.Recording(source, os.environ)
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
        located = dists.locate(module)  # raises dists.AmbiguousInstall (a SourceError) for a doubtful copy
        found[module] = (located.dist, InstalledSource(located.dist, located.base)) if located else (None, None)
    return found


def load(spec: str) -> Surface:
    """A surface from a fixture name (``0.16.0`` / ``vllm-0.16.0``), a JSON file, or a source path."""
    path = Path(spec)
    for candidate in (path, SURFACES / f"{spec}.json", SURFACES / f"vllm-{spec}.json"):
        if candidate.is_file() and candidate.suffix == ".json":
            try:
                return Surface.from_json(json.loads(candidate.read_text()))
            except (ValueError, KeyError) as exc:
                raise SourceError(f"corrupt surface file {candidate}: {exc}") from exc
    if path.exists():
        return evaluate(open_source(path), None, only="vllm")
    known = known_releases() or ["none"]
    raise SourceError(f"no release surface, surface JSON, wheel, sdist or tree named {spec!r} "
                      f"(shipped releases: {known[0]} .. {known[-1]}, {len(known)} in all)")


def known_releases() -> list[str]:
    """The vLLM releases whose surface ships with the kit, oldest first."""
    names = [p.stem[len("vllm-"):] for p in SURFACES.glob("vllm-*.json")]
    return sorted(names, key=versions.parse)


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


def _change(old, new) -> str:
    """``old -> new``; for a probe whose value is a list (the methods of a base class, the fields of a config) what
    was added and removed: ``+kv_cache_access, -disable_padded_drafter_batch``."""
    if isinstance(old, list) and isinstance(new, list):
        return ", ".join([f"+{x}" for x in new if x not in old] + [f"-{x}" for x in old if x not in new])
    return f"{_show(old)} -> {_show(new)}"


def render(surface: Surface) -> str:
    """Header lines, then one aligned row per probe: name, value (or "unknown"), then where or why."""
    lines = []
    for module, info in surface.packages.items():
        if info is None:
            lines.append(f"{module:12} not installed")
        else:
            commit = f" commit {info['commit']}" if info.get("commit") else ""
            lines.append(f"{module:12} {info['name']} {info['version']}{commit} [{info['kind']}]")
    lines.append(f"fingerprint  {surface.fingerprint()}")
    rows = [("PROBE", "VALUE", "WHERE / WHY UNKNOWN")]
    for name, value in sorted(surface.values.items()):
        if isinstance(value, Unknown):
            rows.append((name, "unknown", value.reason))
        else:
            rows.append((name, str(value), surface.where.get(name, "")))
    name_w = max(len(r[0]) for r in rows)
    value_w = max(len(r[1]) for r in rows)
    lines += [f"  {n:{name_w}}  {v:{value_w}}  {w}".rstrip() for n, v, w in rows]
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = ("'diff A B' lists the probes whose values differ between A and B; each is a vLLM release "
                     "(e.g. 0.16.0, surfaces ship with the kit), a surface JSON file, a wheel, an sdist or a tree.")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--wheel", metavar="PATH", help="probe this vLLM wheel instead of the installed packages")
    group.add_argument("--sdist", metavar="PATH", help="probe this vLLM sdist")
    group.add_argument("--src", metavar="PATH", help="probe this vLLM source tree")
    _json_options(parser)
    actions = parser.add_subparsers(dest="action", title="subcommands")
    sub = actions.add_parser("diff", help="probes whose values differ between two vLLM releases, wheels or trees",
                             description="List the probes whose values differ between A and B.", epilog=parser.epilog)
    sub.add_argument("a", metavar="A", help="old side: release (0.16.0), surface JSON, wheel, sdist or tree")
    sub.add_argument("b", metavar="B", help="new side, same forms as A")
    _json_options(sub)


def _json_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the JSON document to stdout instead of the table")
    parser.add_argument("--json-file", metavar="PATH", help="also write the JSON document to PATH")


@dataclass(frozen=True)
class Options:
    """``compat surface``'s command line: what to probe (a build, or the installed packages), or ``diff A B``."""

    build: str | None = None  # --wheel, --sdist or --src
    diff: tuple[str, str] | None = None
    output: Output = Output()

    @classmethod
    def from_args(cls, args) -> "Options":
        diff = (args.a, args.b) if getattr(args, "action", None) == "diff" else None
        build = getattr(args, "wheel", None) or getattr(args, "sdist", None) or getattr(args, "src", None)
        return cls(build, diff, Output.checked(args.json, args.json_file))


def run(options: Options) -> int:
    try:
        if options.diff:
            a, b = options.diff
            changes = diff(load(a), load(b))
            doc = {k: {"old": _jsonable(o), "new": _jsonable(n)} for k, (o, n) in changes.items()}
            header = f"{a} -> {b}: " + (f"{len(changes)} probe(s) changed" if changes else "no probe changed")
            text = "\n".join([header] + [f"  {name}: {_change(old, new)}" for name, (old, new) in changes.items()])
        else:
            if options.build:
                surface = evaluate(open_source(options.build), None, only="vllm")
            else:
                found = installed_sources()
                if found["vllm"][1] is None:
                    raise SourceError("vllm is not installed here (no distribution provides the `vllm` module): "
                                      "nothing to probe; pass --wheel, --sdist or --src to probe a build")
                surface = evaluate(*(found[m][1] for m in PACKAGES))
            doc, text = surface.as_json(), render(surface)
    except (SourceError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exit_policy.decide("surface", problems=[exit_policy.Finding("environment", str(exc))]).code
    return options.output.write([text], doc) or exit_policy.decide("surface").code


def main(argv: list[str] | None = None) -> int:
    from .cli import run_command

    parser = argparse.ArgumentParser(prog="compat surface", description=DESCRIPTION)
    add_arguments(parser)
    return run_command("surface", Options, run, parser.parse_args(argv))


def _jsonable(value):
    return {"unknown": value.reason} if isinstance(value, Unknown) else value


if __name__ == "__main__":
    sys.exit(main())
