"""The ways user code touches CUDA before it builds a generator, in one place for the GPU lane's probes.

vLLM forks its workers unless ``torch.cuda.is_initialized()`` is true in the parent, while torch marks a
fork "bad" as soon as the parent has asked the CUDA runtime anything; each touch below is one such
question.  Shared by ``confirm_after_touch.py`` (the generator's parent) and ``fork_probe.py`` (a bare fork),
so both probe exactly the same calls.  Imports torch only when a touch runs.
"""

from __future__ import annotations

NONE = "none"
#: the ``torch.cuda`` calls a user's GPU check makes, by name
CALLS = ("is_available", "device_count", "init")
TOUCHES = (NONE, *CALLS)


def touch(name: str) -> None:
    """Touch CUDA the named way (``none``: not at all); a name not in TOUCHES is a ValueError, nothing touched."""
    if name not in TOUCHES:
        raise ValueError(f"unknown touch {name!r} (one of {', '.join(TOUCHES)})")
    if name != NONE:
        import torch

        getattr(torch.cuda, name)()
