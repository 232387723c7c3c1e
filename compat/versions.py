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
