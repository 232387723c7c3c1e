"""The one door from the contract harness into ``compat.confirm``: every name of it the harness uses stands here,
so that a change of confirm's names is a change of this file only.  Only public names of ``compat.confirm`` and
its rooms are used; what the harness once patched into confirm (the moment it tied its files, the reference it
built, the death grace) are RunSpec fields and ``main()`` hooks now.

The harness drives confirm's own run (``run(RunSpec)``), its command line (``main``) and its numerics
(``compare``) as a user would get them; the tests' independent judge is ``tests/contract/comparator.py``.
"""

from __future__ import annotations

from pathlib import Path

from compat.confirm import (  # noqa: F401 - re-exported: the harness's vocabulary
    GEN_MOD,
    RTOL,
    TOLERANCE_RULE,
    RunSpec,
    choose,
    hf_reference,
    make_calls,
    num_layers,
    run,
)
from compat.confirm.compare import compare  # noqa: F401
from compat.confirm.drive import StepRecorder  # noqa: F401
from compat.confirm.report import Report  # noqa: F401
from compat.output import Output  # noqa: F401  (a Report writes through it)
from compat.confirm.supervise import error_lines, error_report, exit_now  # noqa: F401


def run_generator(gen_module, model, calls, reference, layers, max_batched=None, *, after=None, dtype="float32",
                  log_path=None, rtol=None, engine=None, death_grace_s=None, report=None) -> dict:
    """compat confirm's run of ``gen_module`` (every captured layer vs ``reference``): its report document."""
    grace = {} if death_grace_s is None else {"death_grace_s": death_grace_s}
    return run(RunSpec(model=model, calls=calls, layers=layers, reference=reference, generator=gen_module,
                       max_batched_tokens=max_batched, after=after, dtype=dtype, log_path=log_path, rtol=rtol,
                       engine=engine or {}, report=report, **grace))


def device_bound(device_type: str) -> tuple[float, str]:
    """compat confirm's float32 bound and its rule on ``device_type`` (1e-3 on CPU, 2e-2 on CUDA)."""
    bound = choose("float32", device_type)
    return bound.rtol, bound.rule


def extract_unavailable() -> str | None:
    """Why ``--reference vllm-extract`` cannot run with this vLLM (None: it can)."""
    from compat.confirm.extract import missing_reason

    return missing_reason()


def main(argv, on_tied=None, tee=None) -> int:
    """compat confirm's main() in this process.  ``on_tied()`` is called once confirm has tied its report to the
    speculators files it imported; ``tee`` (a path): what the vllm-extract reference returned is saved there."""
    from compat.confirm_command import main as confirm_main

    hooks = {}
    if on_tied is not None:
        hooks["on_imported"] = lambda doc: on_tied()
    if tee is not None:
        import torch

        hooks["on_reference"] = lambda ref, meta: torch.save({"refs": ref.refs, "meta": meta}, tee)
    return confirm_main(argv, **hooks)


def log_tail_errors(path: str | Path, offset: int) -> str:
    """confirm's error lines of a log from ``offset`` on."""
    with open(path, "rb") as handle:
        handle.seek(offset)
        return error_lines(handle.read().decode("utf-8", "replace"))
