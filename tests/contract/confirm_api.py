"""The one door from the contract harness into ``compat.confirm``: every name of it the harness uses, and the
three hooks it sets inside it, stand here, so that a change of confirm's names is a change of this file only.

The harness drives confirm's own run (``run_generator``), its command line (``main``) and its numerics
(``compare``) as a user would get them; the tests' independent judge is ``tests/contract/comparator.py``.
"""

from __future__ import annotations

from pathlib import Path

from compat.confirm import (  # noqa: F401 - re-exported: the harness's vocabulary
    GEN_MOD,
    RTOL,
    TOLERANCE_RULE,
    Report,
    StepRecorder,
    abort_run,
    compare,
    error_lines,
    error_report,
    exit_now,
    hf_reference,
    make_calls,
    num_layers,
    run_generator,
)


def device_bound(device_type: str) -> tuple[float, str]:
    """compat confirm's float32 bound and its rule on ``device_type`` (1e-3 on CPU, 2e-2 on CUDA)."""
    from compat.confirm_precision import choose

    bound = choose("float32", device_type)
    return bound.rtol, bound.rule


def extract_unavailable() -> str | None:
    """Why ``--reference vllm-extract`` cannot run with this vLLM (None: it can)."""
    from compat.confirm_extract import missing_reason

    return missing_reason()


def main(argv, on_tied=None, tee=None) -> int:
    """compat confirm's main() in this process.  ``on_tied()`` is called once confirm has tied its report to the
    speculators files it imported; ``tee`` (a path): what the vllm-extract reference returned is saved there."""
    from compat import confirm

    if on_tied is not None:
        tie = confirm._tie_to_files  # noqa: SLF001 - the moment confirm has read its files

        def tie_then_mark(doc):
            tie(doc)
            on_tied()

        confirm._tie_to_files = tie_then_mark  # noqa: SLF001
    if tee is not None:
        import torch

        from compat import confirm_extract

        original = confirm_extract.run_reference

        def run_reference(*args, **kwargs):
            refs, meta = original(*args, **kwargs)
            torch.save({"refs": refs, "meta": meta}, tee)
            return refs, meta

        confirm_extract.run_reference = run_reference
    return confirm.main(argv)


def set_death_grace(seconds: float) -> None:
    """How long confirm's worker watch waits for vLLM's own error before it ends a run with a dead worker."""
    from compat import confirm

    confirm.DEATH_GRACE_S = seconds


def sweep_zmq_by_type() -> None:
    """confirm's zmq sweep after shutdown (``release_zmq``) matches with ``isinstance`` on every object of the
    process, which asks each lazy module proxy (openai's) for its ``__class__`` and so imports its module,
    ~1.5 s per run here; ``type()`` finds the same contexts (a proxy is never one) without importing anything.
    Set only in the harness's own generator children."""
    from compat import confirm

    confirm.release_zmq = _release_zmq_by_type


def _release_zmq_by_type() -> int:
    import gc

    try:
        import zmq
    except ImportError:
        return 0
    closed = 0
    for obj in gc.get_objects():
        if issubclass(type(obj), zmq.Context) and not obj.closed:
            obj.destroy(linger=0)
            closed += 1
    return closed


def log_tail_errors(path: str | Path, offset: int) -> str:
    """confirm's error lines of a log from ``offset`` on."""
    with open(path, "rb") as handle:
        handle.seek(offset)
        return error_lines(handle.read().decode("utf-8", "replace"))
