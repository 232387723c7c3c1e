"""``python -m compat.plan --wheel PATH [--speculators VERSION]``: judge a vLLM build before installing it.

Reads the wheel (or sdist / source tree) statically, pairs it with a
speculators generator (a known release, or the installed one) and prints each
patch's verdict plus a one-line answer to "can I install this?".
"""

from __future__ import annotations

import argparse
import json
import sys

from . import registry
from .probes import PROBES, Unknown
from .sources import SourceError, open_source
from .surface import evaluate, installed_sources

#: speculators releases -> generator variant (the ``speculators.generator`` probe value)
KNOWN_GENERATORS = {"0.3.0": "0.3.0", "0.4.0": "0.4.x", "0.4.0.1": "0.4.x"}


def surface_for(path: str, speculators: str | None):
    surface = evaluate(open_source(path), None, only="vllm")
    _add_installed(surface, "transformers")
    if speculators is None:
        dist, source = installed_sources()["speculators"]
        if source is not None:
            spec_surface = evaluate(None, source, only="speculators")
            surface.values.update(spec_surface.values)
            surface.packages["speculators"] = spec_surface.packages["speculators"]
            return surface
        surface.values["speculators.generator"] = Unknown("speculators not installed; pass --speculators VERSION")
        return surface
    variant = KNOWN_GENERATORS.get(speculators)
    surface.packages["speculators"] = {"name": "speculators", "version": speculators, "kind": "declared", "location": "", "commit": None}
    surface.values["speculators.generator"] = (
        variant if variant else Unknown(f"speculators {speculators} is not a release this kit knows")
    )
    return surface


#: (generator variant or None for any, probe, value, why): combinations no patch rescues
UNSUPPORTED = (
    (None, "kv_cache.from_groups.kv_cache_specs", "no-function",
     "vLLM predates get_kv_cache_config_from_groups (0.11.0), which both generators are built on"),
    ("0.4.x", "kv_cache.from_groups.kv_cache_specs", "required",
     "speculators 0.4.x is written for vLLM >= 0.12.0 (no kv_cache_specs=, vllm.utils.hashing, Scheduler(block_size))"),
)


def unsupported(surface) -> str | None:
    variant = surface.values.get("speculators.generator")
    for wanted, name, value, why in UNSUPPORTED:
        if (wanted is None or wanted == variant) and surface.values.get(name) == value:
            return why
    return None


def _add_installed(surface, module: str) -> None:
    """Probe an installed helper package (transformers) into the plan's surface, or mark it unknown."""
    source = installed_sources()[module][1]
    if source is None:
        for name, spec in PROBES.items():
            if spec.package == module:
                surface.values[name] = Unknown(f"{module} is not installed here")
        return
    extra = evaluate(None, None, source, only=module)
    surface.values.update(extra.values)
    surface.where.update(extra.where)
    surface.packages[module] = extra.packages[module]


def verdict_line(decisions, surface=None) -> str:
    why = unsupported(surface) if surface is not None else None
    if why:
        return f"NO: {why}"
    unknown = [d for d in decisions if d.verdict == "unknown-surface"]
    needed = [d for d in decisions if d.verdict == "needed"]
    if unknown:
        return f"UNKNOWN: {len(unknown)} patch(es) depend on probes that could not decide; do not install blind"
    if needed:
        return f"YES, with {len(needed)} patch(es): install it, then run `python -m compat.apply`"
    return "YES: no patch needed"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compat.plan", description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", required=True, help="vLLM wheel, sdist or source tree")
    parser.add_argument("--speculators", help="speculators release to pair with (default: the installed one)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        surface = surface_for(args.wheel, args.speculators)
    except SourceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    decisions = registry.select(surface)
    answer = verdict_line(decisions, surface)
    if args.json:
        doc = {"surface": surface.as_json(), "patches": [d.as_json() for d in decisions], "answer": answer}
        print(json.dumps(doc, indent=2))
    else:
        info = surface.packages["vllm"]
        print(f"vllm         {info['name']} {info['version']} ({info['kind']})")
        print(f"speculators  {surface.version('speculators') or 'unknown'} (generator {surface.values.get('speculators.generator')})")
        width = max((len(d.patch.id) for d in decisions), default=10)
        for d in decisions:
            shown = "apply" if d.verdict == "needed" else d.verdict
            print(f"  {d.patch.id:{width}}  {shown:16} {d.reason}")
        print(answer)
    return 0 if answer.startswith("YES") else 1


if __name__ == "__main__":
    sys.exit(main())
