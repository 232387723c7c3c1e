"""Probe results and the registration decorator."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..astkit import Reader


@dataclass(frozen=True)
class Reading:
    """A decided probe: ``value`` plus where in the source it was read."""

    value: Any
    file: str | None = None
    line: int | None = None

    @property
    def where(self) -> str:
        if self.file is None:
            return ""
        return f"{self.file}:{self.line}" if self.line else self.file


@dataclass(frozen=True)
class Unknown:
    """A probe that could not decide, and why.  Never a guess."""

    reason: str


@dataclass(frozen=True)
class ProbeSpec:
    name: str
    package: str  # vllm | speculators
    doc: str
    fn: Callable[[Reader], "Reading | Unknown"]

    def run(self, reader: Reader) -> "Reading | Unknown":
        """Evaluate; any exception becomes ``Unknown`` (a probe never raises)."""
        try:
            result = self.fn(reader)
        except Exception as exc:  # noqa: BLE001 - contract: probes never raise
            return Unknown(f"probe failed: {type(exc).__name__}: {exc}")
        if not isinstance(result, (Reading, Unknown)):
            return Unknown(f"probe returned {type(result).__name__}")
        return result


PROBES: dict[str, ProbeSpec] = {}


def missing_file(reader: Reader, missing: str, marker: str, what: str, value: str = "absent") -> "Reading | Unknown":
    """A probe's file ``missing`` is not in the source: ``value`` (read at ``marker``) when ``marker``, a file every
    release of the package has, is there (this release has no such file); Unknown when it is not (not ``what``)."""
    if reader.module(marker) is None:
        return Unknown(f"neither {missing} nor {marker} found: not {what}")
    return Reading(value, marker, None)


def nowhere_in(reader: Reader, prefix: str, name: str):
    """``absent`` when no module under ``prefix`` names ``name`` (every file listed and read); unknown when one
    does (it moved there) or the source cannot list its files (an sdist)."""
    files = reader.source.names(prefix, ".py")
    if not files:
        return Unknown(f"the files under {prefix} cannot be listed here: whether {name} moved is not read")
    holders = [f for f in files if name in (reader.text(f) or "")]
    if holders:
        return Unknown(f"{name} is named in {holders[0]}, not where it was read")
    return Reading("absent", prefix, None)


def probe(name: str, package: str = "vllm"):
    """Register ``fn`` as the probe ``name``; its docstring is the report's description."""

    def register(fn):
        if name in PROBES:
            raise ValueError(f"duplicate probe {name}")
        PROBES[name] = ProbeSpec(name, package, (fn.__doc__ or "").strip().splitlines()[0], fn)
        return fn

    return register
