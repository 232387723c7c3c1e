"""Probe results and the registration decorator."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Union

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
class OpenValues:
    """The values of a probe whose answer is not a closed set (a module path, a list of member names), declared as
    such: ``kind`` says in words what the open part is, ``fits`` checks a value has that shape, and ``fixed`` holds
    the closed words the probe also returns (``absent``).  Patch declarations and plan rules are checked against
    the shape only, so a probe is open only where its code really returns text read from the source."""

    kind: str
    fits: Callable[[Any], bool] = field(compare=False)
    fixed: tuple = ()

    def __contains__(self, value) -> bool:
        return _among(value, self.fixed) or self.fits(value)

    def also(self, *fixed) -> "OpenValues":
        """The same kind with more fixed words (``absent`` where a caller reads a release without the code)."""
        return replace(self, fixed=(*fixed, *self.fixed))

    def __str__(self) -> str:
        return " / ".join([*map(repr, self.fixed), self.kind])


#: What a probe declares it may return: a closed tuple of values, or an open kind.
Values = Union[tuple, OpenValues]


def _among(value, values) -> bool:
    """``value in values`` without Python's ``True == 1``: a probe's ``True`` is not a declared ``1``."""
    return any(type(value) is type(known) and value == known for known in values)


def declares(values: Values, value) -> bool:
    """Whether ``value`` is one a probe declaring ``values`` may return."""
    return value in values if isinstance(values, OpenValues) else _among(value, values)


def described(values: Values) -> str:
    """The declared values, for messages."""
    return str(values) if isinstance(values, OpenValues) else " / ".join(map(repr, values))


def matching(kind: str, pattern: str, fixed: tuple = ()) -> OpenValues:
    """An open kind: any string matching ``pattern`` in full."""
    compiled = re.compile(pattern)
    return OpenValues(kind, lambda value: isinstance(value, str) and compiled.fullmatch(value) is not None, fixed)


#: ``absent`` / ``optional`` / ``required``: how a signature takes a parameter (:func:`compat.astkit.argument_kind`).
ARGUMENT_KINDS = ("absent", "optional", "required")
#: a module found where the code is read, named by its dotted path
MODULE_PATH = r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*"


def module_path(fixed: tuple = ()) -> OpenValues:
    return matching("a dotted module path", MODULE_PATH, fixed)


def names_joined(kind: str, fixed: tuple = ()) -> OpenValues:
    """An open kind: names read from the source, joined by commas (none empty)."""
    return matching(kind, r"[^,]+(,[^,]+)*", fixed)


def _sorted_names(value) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value) and value == sorted(value)


def sorted_names(kind: str, fixed: tuple = ()) -> OpenValues:
    """An open kind: a sorted list of names read from the source (a class's members, a config's fields)."""
    return OpenValues(kind, _sorted_names, fixed)


def _checked(name: str, values) -> Values:
    """``values`` as a declaration, or a ValueError naming the probe: every probe says what it may return."""
    if values is None:
        raise ValueError(f"probe {name} declares no values: pass values=(...) or an OpenValues kind")
    if isinstance(values, OpenValues):
        return values
    if not isinstance(values, tuple) or not values:
        raise ValueError(f"probe {name}: values must be a non-empty tuple or an OpenValues kind, not {values!r}")
    return values


@dataclass(frozen=True)
class ProbeSpec:
    name: str
    package: str  # vllm | speculators
    doc: str
    fn: Callable[[Reader], "Reading | Unknown"]
    values: Values  # what the probe may return (:func:`probe` refuses a probe without)

    def declares(self, value) -> bool:
        return declares(self.values, value)

    @property
    def declared(self) -> str:
        return described(self.values)

    def run(self, reader: Reader) -> "Reading | Unknown":
        """Evaluate; any exception becomes ``Unknown`` (a probe never raises), and so does a value the probe does
        not declare: a shape upstream that no one has seen is never judged as a known value."""
        try:
            result = self.fn(reader)
        except Exception as exc:  # noqa: BLE001 - contract: probes never raise
            return Unknown(f"probe failed: {type(exc).__name__}: {exc}")
        if not isinstance(result, (Reading, Unknown)):
            return Unknown(f"probe returned {type(result).__name__}")
        if isinstance(result, Reading) and not self.declares(result.value):
            where = f" at {result.where}" if result.where else ""
            return Unknown(f"{self.name} returned undeclared value {result.value!r}{where} (declared: "
                           f"{self.declared}): a shape not seen, so unknown rather than a guess")
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


def probe(name: str, package: str = "vllm", *, values: Values | None = None):
    """Register ``fn`` as the probe ``name``; its docstring is the report's description.  ``values`` declares
    every value it may return (a tuple, or an :class:`OpenValues` kind): required, so that patch declarations and
    plan rules can be checked against it (:func:`compat.registry.validate`)."""
    declared = _checked(name, values)

    def register(fn):
        if name in PROBES:
            raise ValueError(f"duplicate probe {name}")
        PROBES[name] = ProbeSpec(name, package, (fn.__doc__ or "").strip().splitlines()[0], fn, declared)
        return fn

    return register
