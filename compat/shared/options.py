"""``compat confirm``'s options as one frozen value, and what both paths resolve alike.

Why a frozen value: the command line is read once, into :class:`ConfirmOptions`, and both pipelines (the serve
path's compat/serve/options.py and files_check.py, the generator path's compat/confirm/cli.py) read it; a default
a path fills in (:func:`resolve_common`) makes a new value instead of writing into the one it was given, so what
a function received is what the user asked for.  The checkpoint's facts are read once with it
(:class:`compat.checkpoint.Checkpoint`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from compat.checkpoint import Checkpoint, is_local
from compat.errors import UsageError
from compat.output import Output

#: the default --max-model-len, unless the checkpoint's own limit is smaller
MAX_MODEL_LEN = 512


@dataclass(frozen=True)
class ConfirmOptions:
    """Every option of ``compat confirm`` (compat/shared/arguments.py), plus ``python -m compat.serve``'s two and
    what the paths resolve: ``sizes`` (the calls' sequence counts) and ``checkpoint`` (read from ``--model``)."""

    path: str | None = None
    model: str | None = None
    layers: str = "all"
    calls: str | None = None
    prompts: str | None = None
    reference: str = "hf"
    dtype: str = "float32"
    rtol: float | None = None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    trust_remote_code: bool = False
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    max_batched_tokens: int | None = None
    log: str | None = None
    verbose: bool = False
    json: bool = False
    json_file: str | None = None
    files: str | None = None
    check: str | None = None
    accept_weaker: bool = False
    serve_args: tuple[str, ...] = ()
    keep_work_dir: bool = False
    work_dir: str | None = None
    vocab: int = 512
    sizes: tuple[int, ...] | None = None
    checkpoint: Checkpoint | None = None

    @classmethod
    def from_args(cls, args) -> "ConfirmOptions":
        """The options of a parsed command line (an argparse result, or any object with some of these attributes:
        the rest take their defaults); the checkpoint is read here when ``--model`` is a local one."""
        if isinstance(args, cls) and (args.checkpoint is not None or not args.model):
            return args  # already read
        given = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)}
        given["serve_args"] = tuple(given.get("serve_args") or ())
        options = cls(**given)
        Output.checked(options.json, options.json_file)  # an unwritable --json-file: refused before anything runs
        if options.checkpoint is None and options.model and is_local(options.model):
            options = dataclasses.replace(options, checkpoint=Checkpoint.read(options.model))
        return options

    @property
    def output(self) -> Output:
        return Output(self.json, self.json_file)

    def replace(self, **changes) -> "ConfirmOptions":
        return dataclasses.replace(self, **changes)


def resolve_common(options: ConfirmOptions, calls_default, budget_default) -> ConfirmOptions:
    """The options both paths share, checked, with their path's defaults filled in (``sizes``, the resolved
    ``max_model_len`` and ``max_batched_tokens``); UsageError naming the first problem."""
    if options.calls is None:
        sizes = tuple(calls_default)
    else:
        try:
            sizes = tuple(int(n) for n in options.calls.split(","))
        except ValueError:
            sizes = ()
        if not sizes or min(sizes) < 1:
            raise UsageError(f"--calls wants positive sequence counts, e.g. 1,11,33,11; got {options.calls!r}")
    max_model_len = options.max_model_len
    if max_model_len is None:
        limit = options.checkpoint.max_positions if options.checkpoint else None
        max_model_len = min(MAX_MODEL_LEN, limit) if limit else MAX_MODEL_LEN
    budget = budget_default if options.max_batched_tokens is None else options.max_batched_tokens
    resolved = options.replace(sizes=sizes, max_model_len=max_model_len, max_batched_tokens=budget)
    for name in ("tensor_parallel_size", "pipeline_parallel_size", "max_model_len", "max_batched_tokens"):
        if getattr(resolved, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(resolved, name)}")
    if resolved.max_model_len < 2:
        raise UsageError(f"--max-model-len {resolved.max_model_len} leaves no room for a prompt and its one generated "
                         f"token")
    if resolved.rtol is not None and not resolved.rtol > 0:
        raise UsageError(f"--rtol must be > 0, got {resolved.rtol}")
    if resolved.gpu_memory_utilization is not None and not 0 < resolved.gpu_memory_utilization <= 1:
        raise UsageError(f"--gpu-memory-utilization must lie in (0, 1], got {resolved.gpu_memory_utilization}")
    return resolved
