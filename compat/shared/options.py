"""What both paths of ``compat confirm`` share: the options they resolve alike and how a usage problem is said.

The serve path (compat/serve/options.py, files_check.py) and the generator path (compat/confirm/cli.py) each
resolve the shared command line with their own defaults, through the same checks and the same words.
"""

from __future__ import annotations

import sys

from compat.checkpoint import max_positions
from compat.errors import UsageError

#: the default --max-model-len, unless the checkpoint's own limit is smaller
MAX_MODEL_LEN = 512


def _own_limit(model: str) -> int | None:
    """The checkpoint's own context limit, or None where its config does not say or cannot be read (the checks of
    the checkpoint say that, not this default)."""
    try:
        return max_positions(model)
    except (OSError, ValueError, TypeError):
        return None


def resolve_common(args, calls_default, budget_default) -> str:
    """Check the options both paths share and fill in their path's defaults on ``args`` (``args.sizes``, the
    resolved ``max_model_len`` and ``max_batched_tokens``); the usage problem, or ''."""
    if args.calls is None:
        args.sizes = list(calls_default)
    else:
        try:
            args.sizes = [int(n) for n in args.calls.split(",")]
        except ValueError:
            args.sizes = []
        if not args.sizes or min(args.sizes) < 1:
            return f"--calls wants positive sequence counts, e.g. 1,11,33,11; got {args.calls!r}"
    if args.max_model_len is None:
        limit = _own_limit(args.model)
        args.max_model_len = min(MAX_MODEL_LEN, limit) if limit else MAX_MODEL_LEN
    if args.max_batched_tokens is None:
        args.max_batched_tokens = budget_default
    for name in ("tensor_parallel_size", "pipeline_parallel_size", "max_model_len", "max_batched_tokens"):
        if getattr(args, name) < 1:
            return f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}"
    if args.max_model_len < 2:
        return f"--max-model-len {args.max_model_len} leaves no room for a prompt and its one generated token"
    if args.rtol is not None and not args.rtol > 0:
        return f"--rtol must be > 0, got {args.rtol}"
    if args.gpu_memory_utilization is not None and not 0 < args.gpu_memory_utilization <= 1:
        return f"--gpu-memory-utilization must lie in (0, 1], got {args.gpu_memory_utilization}"
    return ""


def said(problem: UsageError) -> int:
    """The one place a usage problem becomes output and an exit code: confirm's prefix, its message, exit 2."""
    print(f"confirm: {problem}", file=sys.stderr)
    return problem.exit_code
