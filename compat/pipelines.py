"""The kit's two pipelines, and which one a speculators release, an install or a patch belongs to.

speculators generates EAGLE-3 training data in one of two ways, decided by its release alone:

* ``generator``: 0.3.0 and 0.4.x drive vLLM in-process (``VllmHiddenStatesGenerator``: vLLM's ``Request``,
  ``Scheduler``, KV config, ``collective_rpc``).  The kit's plan rules are compat/plan.py's, its probes
  compat/probes/, its patches patches/p*.py, its confirm runner compat/confirm/.
* ``serve``: 0.5 and later run ``vllm serve`` with ``extract_hidden_states`` and a KV connector, and a client
  collects the files.  Plan rules, probes and confirm runner: compat/serve/; patches: patches/serve/.

This table is the one place that says so: ``plan``, ``apply``, ``confirm`` and ``catalogue`` ask it, so a release
cannot be sent down one pipeline by one command and down the other by another.  A version that cannot be read
belongs to no pipeline (``None``): the caller says it cannot tell, never guesses.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version


@dataclass(frozen=True)
class Pipeline:
    name: str  # what ``compat confirm --path`` calls it
    speculators: SpecifierSet  # the releases that take it
    package: str  # its home in the kit
    patch_word: str | None  # the word a patch id of this pipeline carries second ("vllm.serve.*"); None: none
    summary: str

    def takes(self, version: Version) -> bool:
        return self.speculators.contains(version, prereleases=True)


GENERATOR = Pipeline("generator", SpecifierSet("<0.5.0"), "compat.confirm", None,
                     "speculators 0.3.0 / 0.4.x's in-process generator")
SERVE = Pipeline("serve", SpecifierSet(">=0.5.0"), "compat.serve", "serve",
                 "speculators >= 0.5 through `vllm serve` with extract_hidden_states")
PIPELINES = {p.name: p for p in (GENERATOR, SERVE)}
#: the first speculators release of the serve pipeline
MODERN = Version("0.5.0")


def for_speculators(version: str | Version | None) -> Pipeline | None:
    """The pipeline a speculators release takes; None where the version is missing or not a version."""
    if version is None:
        return None
    try:
        parsed = version if isinstance(version, Version) else Version(str(version))
    except InvalidVersion:
        return None
    return next((p for p in PIPELINES.values() if p.takes(parsed)), None)


def of_patch_id(patch_id: str) -> Pipeline:
    """The pipeline a patch belongs to, by its id: a serve patch's id names ``serve`` second
    (``vllm.serve.deepseek_final_layer``, declared under patches/serve/); every other patch is the generator's."""
    words = patch_id.split(".")
    return SERVE if len(words) > 2 and words[1] == SERVE.patch_word else GENERATOR
