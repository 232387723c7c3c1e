"""compat.confirm.supervise without vLLM: the one zmq sweep.

The root cause of a failed run is compat.vllm_log's, tested in test_vllm_log.py.
"""

from __future__ import annotations

import pytest

from compat.confirm.supervise import release_zmq


def test_the_one_zmq_sweep_destroys_open_contexts_and_leaves_closed_ones():
    zmq = pytest.importorskip("zmq")
    ctx, done = zmq.Context(), zmq.Context()
    done.term()
    closed = release_zmq()
    assert closed >= 1 and ctx.closed


def test_there_is_one_zmq_sweep_in_the_tree():
    """Two sweeps once existed (compat.confirm and the contract harness); there must be one: the harness has none."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    sweeps = [p for folder in ("compat", "tests", "fixtures", "benchmarks") for p in (root / folder).rglob("*.py")
              if "zmq.Context" in p.read_text(errors="replace") and p.name != Path(__file__).name]
    assert [p.relative_to(root).as_posix() for p in sweeps] == ["compat/confirm/supervise.py"]
