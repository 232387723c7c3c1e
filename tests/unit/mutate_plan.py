"""Mutation check of tests/unit/test_plan.py: a wrong probe value or a wrong vLLM prefilter must fail it.

    python tests/unit/mutate_plan.py

Mutants, all generated from the declarations so that a new patch or probe is
covered without editing this file:

* ``force P=v``: probe P reads v on every surface, for each value v under
  which some patch (or the plan's NO floor) acts;
* ``drop/lower/raise <patch>``: the patch's vLLM prefilter removed, its
  lower bound moved one shipped release down, or moved just past the release
  where test_plan's table says the change became reachable.

Each mutant runs test_plan.py's wheel-free tests in a fresh interpreter with
this module loaded as a pytest plugin (``-p tests.unit.mutate_plan``) that
applies the mutant named in $SPECDEC_PLAN_MUTANT.  A mutant is killed when a
test fails that passes unmutated.  Prints one row per mutant; exits 1 when a
mutant survives that EQUIVALENT does not explain.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ENV = "SPECDEC_PLAN_MUTANT"
ROOT = Path(__file__).resolve().parents[2]
TESTS = "tests/unit/test_plan.py"
SELECT = "not evidence and not undone and not cli"  # skip the checks of the table itself against wheels

#: Mutants that cannot change any verdict on upstream history, and why.
EQUIVALENT = {
    "force request.block_hasher=optional": (
        "Request(block_hasher=) is optional on every release from 0.10.1; the only patch reading it (p13) also "
        "needs enable_prefix_caching to default to True, which starts at 0.12.0"),
    "force request.block_hasher=required": (
        "same as =optional: below 0.10.1, where the value differs, enable_prefix_caching defaults to None"),
}


# -- the plugin side ---------------------------------------------------------------------------


def pytest_configure(config):
    raw = os.environ.get(ENV)
    if raw:
        apply(json.loads(raw))


def apply(mutant: dict) -> None:
    """Install ``mutant`` into compat.registry before test_plan.py imports from it."""
    from compat import registry

    if mutant["kind"] == "force":
        original_select = registry.select

        def select(surface, *args, **kwargs):
            surface.values[mutant["probe"]] = mutant["value"]
            return original_select(surface, *args, **kwargs)

        registry.select = select
    else:
        original_load = registry.load_patches

        def load_patches(*args, **kwargs):
            return [_moved(p, mutant) for p in original_load(*args, **kwargs)]

        registry.load_patches = load_patches


def _moved(patch, mutant: dict):
    import dataclasses

    if patch.id != mutant["patch"]:
        return patch
    versions = dict(patch.versions)
    if mutant["kind"] == "drop":
        versions.pop("vllm")
    else:
        versions["vllm"] = mutant["spec"]
    return dataclasses.replace(patch, versions=versions)


# -- the driver side ---------------------------------------------------------------------------


def mutants() -> list[tuple[str, dict]]:
    from compat.plan import INCOMPATIBLE
    from compat.registry import load_patches
    from compat.surface import known_releases

    patches = load_patches()
    forced: dict[str, list] = {}
    for patch in patches:
        for probe, accepted in patch.requires.items():
            forced.setdefault(probe, [])
            forced[probe] += [v for v in accepted if v not in forced[probe]]
    for _variant, probe, value, _why in INCOMPATIBLE:
        forced.setdefault(probe, [])
        if value not in forced[probe]:
            forced[probe].append(value)
    out = [(f"force {probe}={value}", {"kind": "force", "probe": probe, "value": value})
           for probe in sorted(forced) for value in forced[probe]]

    from packaging.version import Version

    from tests.unit.test_plan import CHANGES, reachable_from, series_before

    reachable = {c.patch: reachable_from(c) for c in CHANGES}
    releases = known_releases()
    for patch in patches:
        spec = patch.versions.get("vllm")
        if spec is None:
            continue
        out.append((f"drop {patch.id}", {"kind": "drop", "patch": patch.id}))
        bound = re.fullmatch(r">=\s*(\d+(?:\.\d+)*)(?:\.dev0)?", spec.strip())
        if not bound or bound.group(1) not in releases:
            out.append((f"move {patch.id}: prefilter {spec!r} is not '>=<release>[.dev0]'", {"kind": "skip"}))
            continue
        i = releases.index(bound.group(1))
        # one shipped release lower; and just past the release where the change became reachable
        top = releases.index(reachable[patch.id]) if patch.id in reachable else i
        for kind, j in (("lower", i - 1), ("raise", top + 1)):
            if 0 <= j < len(releases):
                spec2 = f">={releases[j]}.dev0"
                mutant = {"kind": kind, "patch": patch.id, "spec": spec2}
                window = series_before(reachable[patch.id]) if patch.id in reachable else None
                if kind == "lower" and window and Version(releases[j]) >= Version(window):
                    mutant["within"] = window
                out.append((f"{kind} {patch.id} {spec} -> {spec2}", mutant))
    return out


def failures(mutant: dict | None) -> set[str] | None:
    """Ids of the failing tests under ``mutant`` (None: the run itself broke)."""
    env = dict(os.environ)
    env.pop(ENV, None)
    if mutant is not None:
        env[ENV] = json.dumps(mutant)
    # --runxfail: a known-bug xfail that flips under a mutant is not a kill
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rf", "--no-header", "--runxfail",
           "-p", "tests.unit.mutate_plan", TESTS, "-k", SELECT]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        return None
    return {line.split()[1] for line in proc.stdout.splitlines() if line.startswith("FAILED ")}


def main(argv: list[str] | None = None) -> int:
    import argparse

    global TESTS
    parser = argparse.ArgumentParser(prog="python tests/unit/mutate_plan.py", description=__doc__.splitlines()[0])
    parser.add_argument("--tests", default=TESTS, help=f"test file to judge (default {TESTS}), relative to the repo root")
    TESTS = parser.parse_args(argv).tests
    sys.path.insert(0, str(ROOT))
    baseline = failures(None)
    if baseline is None:
        print("the unmutated run broke; see stderr")
        return 2
    print(f"unmutated: {len(baseline)} failing" + (" (mutants are judged on the other tests):" if baseline else ""))
    for test in sorted(baseline):
        print(f"    {test}")
    rows, unexplained = [], 0
    for label, mutant in mutants():
        if mutant["kind"] == "skip":
            rows.append((label, "not run", ""))
            unexplained += 1
            continue
        failed = failures(mutant)
        if failed is None:
            rows.append((label, "broke", "see stderr"))
            unexplained += 1
            continue
        new = sorted(failed - baseline)
        if new:
            by_test = Counter(t.split("::", 1)[1].split("[", 1)[0].removeprefix("test_") for t in new)
            rows.append((label, "killed", ", ".join(f"{name} x{n}" for name, n in sorted(by_test.items()))))
        elif label in EQUIVALENT:
            rows.append((label, "survived", "equivalent: " + EQUIVALENT[label]))
        elif mutant.get("within"):
            rows.append((label, "survived", f"equivalent: still within the coarse window test_plan allows "
                                            f"(>= {mutant['within']}, one minor series below the change)"))
        else:
            rows.append((label, "SURVIVED", "no test failed"))
            unexplained += 1
    width = max(len(r[0]) for r in rows)
    for label, verdict, detail in rows:
        print(f"{label:{width}}  {verdict:8}  {detail}")
    killed = sum(r[1] == "killed" for r in rows)
    print(f"{killed} of {len(rows)} mutants killed, {len(rows) - killed - unexplained} equivalent, {unexplained} unexplained")
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
