"""Upstream facts for judging a release by its version alone (``compat plan --speculators/--transformers VERSION``).

Each table was read by the kit's own probes from every published wheel
(``pip download --no-deps NAME==X``, then the probe on the wheel); it says
nothing about releases it does not list, which stay unknown.
"""

from __future__ import annotations

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from .probes import Unknown

#: ``speculators.generator`` of every speculators release (0.0.1 .. 0.9.0, all on PyPI as of 2026-11).
SPECULATORS_GENERATOR = {
    "0.0.1": "absent", "0.1.0": "absent", "0.2.0": "absent",
    "0.3.0": "0.3.0", "0.4.0": "0.4.x", "0.4.0.1": "0.4.x",
    "0.5.0": "absent", "0.6.0": "absent", "0.6.0.1": "absent", "0.6.0.2": "absent",
    "0.7.0": "absent", "0.7.0.1": "absent", "0.7.0.2": "absent", "0.8.0": "absent", "0.8.1": "absent",
    "0.9.0": "absent",
}
GENERATOR_ADDED = Version("0.3.0")
#: speculators 0.5.0 dropped VllmHiddenStatesGenerator: it generates data through ``vllm serve``.
GENERATOR_REMOVED = Version("0.5.0")

#: Every transformers release from 4.40.0 to 5.24.0 whose ``transformers.config_torch_annotation`` was read.
TRANSFORMERS_CHECKED = """
4.40.0 4.40.1 4.40.2 4.41.0 4.41.1 4.41.2 4.42.0 4.42.1 4.42.2 4.42.3 4.42.4 4.43.0 4.43.1 4.43.2 4.43.3
4.43.4 4.44.0 4.44.1 4.44.2 4.45.0 4.45.1 4.45.2 4.46.1 4.46.2 4.46.3 4.47.0 4.47.1 4.48.0 4.48.1 4.48.2
4.48.3 4.49.0 4.50.0 4.50.1 4.50.2 4.50.3 4.51.0 4.51.1 4.51.2 4.51.3 4.52.1 4.52.2 4.52.3 4.52.4 4.53.0
4.53.1 4.53.2 4.53.3 4.54.0 4.54.1 4.55.0 4.55.1 4.55.2 4.55.3 4.55.4 4.56.0 4.56.1 4.56.2 4.57.1 4.57.2
4.57.3 4.57.4 4.57.5 4.57.6 5.0.0 5.1.0 5.2.0 5.3.0 5.4.0 5.5.0 5.5.1 5.5.2 5.5.3 5.5.4 5.6.0 5.6.1 5.6.2
5.7.0 5.8.0 5.8.1 5.9.0 5.10.1 5.10.2 5.10.4 5.11.0 5.12.0 5.12.1 5.13.0 5.13.1 5.14.0 5.14.1 5.15.0 5.15.1
5.16.0 5.16.1 5.17.0 5.18.0 5.19.0 5.20.0 5.20.1 5.20.2 5.21.0 5.21.1 5.22.0 5.22.1 5.22.2 5.23.0 5.24.0
""".split()
#: The transformers change points the probes read, each probe's (first release with the new value, value before,
#: value from it on); every checked release before the point has the old value.
#: ``transformers.config_torch_annotation``: 5.4.0 is the first release whose PreTrainedConfig annotates a field
#: with torch.* while importing torch only under TYPE_CHECKING.
#: ``transformers.prepare_4d_causal_attention_mask``: 5.24.0 removed ``transformers/modeling_attn_mask_utils.py``
#: (read in the 4.40.0, 4.57.6, 5.3.0, 5.19.0, 5.23.0 and 5.24.0 wheels by tests/unit/test_probes_releases.py).
TRANSFORMERS_CHANGES = {
    "transformers.config_torch_annotation": (Version("5.4.0"), "none", "unresolvable"),
    "transformers.prepare_4d_causal_attention_mask": (Version("5.24.0"), "present", "absent"),
}
ANNOTATION = "transformers.config_torch_annotation"


def speculators_generator(version: str) -> tuple[str | Unknown, str]:
    """(generator variant, "absent" or Unknown; how it is known) for a speculators version string."""
    try:
        v = Version(version)
    except InvalidVersion:
        return Unknown(f"{version!r} is not a version"), "not a PEP 440 version"
    for known, variant in SPECULATORS_GENERATOR.items():
        if Version(known) == v:
            return variant, f"speculators {known} release, checked"
    newest = max(SPECULATORS_GENERATOR, key=Version)
    if v >= GENERATOR_REMOVED:
        return "absent", (f"not a release checked here (newest checked {newest}); no release since "
                          f"{GENERATOR_REMOVED} has the generator")
    if v < GENERATOR_ADDED:
        return "absent", f"predates speculators {GENERATOR_ADDED}, the first release with the generator"
    return Unknown(f"speculators {version} is not a release this kit knows (known: "
                   f"{', '.join(k for k, g in SPECULATORS_GENERATOR.items() if g != 'absent')})"), "unknown release"


def _value(probe: str, v: Version) -> str:
    since, before, after = TRANSFORMERS_CHANGES[probe]
    return after if v >= since else before


def transformers_value(probe: str, version: str) -> str | Unknown:
    """The value of transformers probe ``probe`` on one transformers release, or Unknown if not checked."""
    if probe not in TRANSFORMERS_CHANGES:
        return Unknown(f"the kit has no table for {probe}; pass the transformers wheel instead")
    try:
        v = Version(version)
    except InvalidVersion:
        return Unknown(f"{version!r} is not a version")
    if not any(Version(c) == v for c in TRANSFORMERS_CHECKED):
        return Unknown(f"transformers {version} is not a release checked here "
                       f"({TRANSFORMERS_CHECKED[0]} .. {TRANSFORMERS_CHECKED[-1]}); pass its wheel instead")
    return _value(probe, v)


def transformers_value_in(probe: str, specifier: str) -> str | Unknown:
    """The value every checked release allowed by ``specifier`` agrees on, or Unknown.

    Unknown when the range reaches past the newest checked release, below the
    oldest, or holds releases that disagree.
    """
    if probe not in TRANSFORMERS_CHANGES:
        return Unknown(f"the kit has no table for {probe}; pass --transformers VERSION or its wheel")
    spec = SpecifierSet(specifier)
    checked = [Version(c) for c in TRANSFORMERS_CHECKED]
    allowed = [v for v in checked if spec.contains(v, prereleases=True)]
    if not allowed:
        return Unknown(f"no checked transformers release satisfies {specifier}")
    newer = Version(f"{checked[-1].major}.{checked[-1].minor}.{checked[-1].micro + 1}")
    older = Version(f"{checked[0].major}.{checked[0].minor - 1}.0") if checked[0].minor else Version("0")
    if spec.contains(newer, prereleases=True) or spec.contains(older, prereleases=True):
        return Unknown(f"transformers {specifier} admits releases outside the checked "
                       f"{checked[0]} .. {checked[-1]}; pass --transformers VERSION")
    values = {_value(probe, v) for v in allowed}
    if len(values) > 1:
        return Unknown(f"transformers {specifier} admits releases on both sides of {probe}'s change "
                       f"(in {TRANSFORMERS_CHANGES[probe][0]}); pass --transformers VERSION")
    return values.pop()


def transformers_annotation(version: str) -> str | Unknown:
    """``transformers.config_torch_annotation`` of one transformers release, or Unknown if not checked."""
    return transformers_value(ANNOTATION, version)


def transformers_annotation_in(specifier: str) -> str | Unknown:
    """``transformers.config_torch_annotation`` agreed on by every checked release in ``specifier``, or Unknown."""
    return transformers_value_in(ANNOTATION, specifier)
