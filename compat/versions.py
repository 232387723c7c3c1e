"""PEP 440 handling that behaves the same on every ``packaging`` release.

``v in SpecifierSet(...)`` changed its pre-release default in packaging 26, so
every range check here goes through :func:`in_range` with ``prereleases=True``:
a nightly such as ``0.16.0rc2.dev123+gabc1234`` must match ``>=0.16.0.dev0``.
"""

from __future__ import annotations

import re

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

_COMMIT = re.compile(r"^g([0-9a-f]{7,40})$")


def parse(text: str | Version) -> Version:
    """Parse a version; raise ``ValueError`` with the offending text."""
    if isinstance(text, Version):
        return text
    try:
        return Version(str(text))
    except InvalidVersion as exc:
        raise ValueError(f"not a PEP 440 version: {text!r}") from exc


def nightly_commit(text: str | Version) -> str | None:
    """The git commit a nightly was built from (``+g933cdea44.cu129`` -> ``933cdea44``)."""
    local = parse(text).local
    if not local:
        return None
    for part in local.split("."):
        match = _COMMIT.match(part)
        if match:
            return match.group(1)
    return None


def in_range(spec: str, version: str | Version) -> bool:
    """True if ``version`` satisfies ``spec``; pre-releases and nightlies always count."""
    try:
        specifiers = SpecifierSet(spec)
    except InvalidSpecifier as exc:
        raise ValueError(f"not a PEP 440 specifier: {spec!r}") from exc
    return specifiers.contains(parse(version), prereleases=True)


def orders_with(version: str | Version, lines: list[str] | tuple[str, ...]) -> bool:
    """Can ``version`` be placed among the releases ``lines`` (``X.Y`` or full versions) by its number alone?

    A build that is a dev or local version of a series no release has
    (``0.1.dev1+gabc1234``: what setuptools-scm writes for a checkout without
    tags) does not order: its number says nothing about the code.  A plain
    release, a build of a known series, and a build newer than every known
    series do.
    """
    v = parse(version)
    known = {parse(line).release[:2] for line in lines}
    if not known or not (v.is_devrelease or v.local) or v.release[:2] in known:
        return True
    return v.release[:2] > max(known)


def prefilter(spec: str, version: str | Version, lines: list[str] | tuple[str, ...]) -> bool | None:
    """:func:`in_range`, or ``None`` when the version cannot be ordered with the releases (unknown, never False)."""
    try:
        if not orders_with(version, lines):
            return None
    except ValueError:
        return None  # not PEP 440: no order at all
    return in_range(spec, version)
