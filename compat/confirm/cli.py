"""The generator path's side of ``compat confirm``: its options checked (exit 2, nothing run), then ``run(spec)``.

``compat confirm`` (compat/confirm_command.py) parses the shared command line (compat/shared/arguments.py) and
hands a generator-path run here: the options this path resolves its own way (every layer by default, the
invariant calls, the prompts' batches), the host memory its engines need, and the report.
"""

from __future__ import annotations

import sys
import time

from compat.confirm.compare import invariant_calls
from compat.errors import UsageError
from compat.shared.arguments import CALLS
from compat.shared.options import ConfirmOptions, resolve_common


def make_calls(sizes=CALLS, seed: int = 0, vocab: int = 512, longest: int = 400):
    """Deterministic token-id prompts per call; a 33-call alone exceeds 8192 tokens.  No prompt is longer than
    ``longest`` (max_model_len - 1: the prompt and its one generated token fit)."""
    import random

    rng = random.Random(seed)
    calls = []
    for n in sizes:
        low, high = (250, 400) if n >= 33 else (5, 300)
        calls.append([[rng.randrange(4, vocab) for _ in range(min(rng.randint(low, high), longest))]
                      for _ in range(n)])
    return calls


GENERATOR_BUDGET = 96


def spec_from_args(args: ConfirmOptions):
    """The ``RunSpec`` of confirm's options; UsageError where it cannot be one (nothing run)."""
    from compat.confirm.runner import RunSpec

    if not args.model:
        raise UsageError("--model PATH is required (or --check REPORT)")
    checkpoint = args.checkpoint
    if checkpoint is None:
        raise UsageError(f"{args.model} is not a local HF checkpoint (no config.json)")
    if checkpoint.unread or checkpoint.num_layers is None:
        raise UsageError(f"cannot read layers: {checkpoint.unread or f'{args.model}/config.json gives no num_hidden_layers'}")
    depth, width = checkpoint.num_layers, checkpoint.hidden_size
    try:
        layers = list(range(depth)) if args.layers == "all" else [int(x) for x in args.layers.split(",")]
    except ValueError as exc:
        raise UsageError(f"cannot read layers: {exc}")
    if not layers or any(not 0 <= k < depth for k in layers):
        raise UsageError(f"layer ids must lie in 0..{depth - 1}, got {args.layers}")
    if len(set(layers)) != len(layers):
        raise UsageError(f"--layers names a layer twice: {args.layers}")
    args = resolve_common(args, CALLS, GENERATOR_BUDGET)
    if args.files:
        raise UsageError("--files is the serve path's (--path serve): it checks vllm serve's hidden-states files")
    if args.serve_args:
        raise UsageError("--serve-arg is the serve path's (--path serve): it passes an argument to vllm serve; the "
                      "generator path starts no server")
    if args.keep_work_dir:
        raise UsageError("--keep-work-dir is the serve path's (--path serve): it keeps the folder of vllm serve's log and "
                      "files; the generator path makes none (its log is the file --log names)")
    if args.reference == "self":
        raise UsageError("--reference self is the serve path's (--path serve): it rebuilds logits from a served file's "
                      "final row and compares it with the same server's prompt_logprobs; the generator path has "
                      "hf, vllm-extract and none")
    sizes = list(args.sizes)
    if args.prompts:
        from compat.shared.prompts import PromptsError, calls_from, load_prompts

        try:
            prompts = load_prompts(args.prompts, checkpoint, args.trust_remote_code, args.max_model_len - 1)
        except PromptsError as exc:
            raise UsageError(str(exc))
        calls = calls_from(prompts, sizes)
        fillers = prompts
    else:
        calls = make_calls(sizes, longest=args.max_model_len - 1)
        fillers = [p for c in make_calls((33,), seed=1, longest=args.max_model_len - 1) for p in c]
    if args.reference == "vllm-extract":
        from compat.confirm.extract import missing_reason

        reason = missing_reason()
        if reason:
            raise UsageError(f"--reference vllm-extract: {reason}; use --reference hf or none")
    batch, repeat = invariant_calls(calls[0], fillers)
    calls += [batch, repeat]
    checks = {"batch": len(calls) - 2, "repeat": len(calls) - 1}
    engine = {"tensor_parallel_size": args.tensor_parallel_size, "max_model_len": args.max_model_len}
    if args.pipeline_parallel_size > 1:
        engine["pipeline_parallel_size"] = args.pipeline_parallel_size
    if args.gpu_memory_utilization is not None:
        engine["gpu_memory_utilization"] = args.gpu_memory_utilization  # both speculators 0.3.0 and 0.4.x take it
    extra = {"tensor_parallel_size": args.tensor_parallel_size, "pipeline_parallel_size": args.pipeline_parallel_size,
             "prompts": args.prompts or "generated", "model": str(args.model), "depth": depth,
             "calls_requested": sizes, "invariant_calls": checks, "max_batched_tokens": args.max_batched_tokens,
             "prompt_lengths": [[len(p) for p in c] for c in calls]}
    return RunSpec(model=args.model, calls=calls, layers=layers, reference=args.reference, dtype=args.dtype,
                   rtol=args.rtol, engine=engine, max_batched_tokens=args.max_batched_tokens, checks=checks,
                   hidden_size=width, trust_remote_code=args.trust_remote_code,
                   log_path=args.log, verbose=args.verbose, tie=True, extra=extra)


def run_generator(args: ConfirmOptions, **hooks) -> int:
    """A generator-path run of confirm's options (``hooks``: RunSpec fields to add); its exit code."""
    spec = spec_from_args(args)
    from dataclasses import replace

    from compat.confirm.report import Report
    from compat.confirm.runner import SpecError
    from compat.confirm.runner import run as run_spec
    from compat.confirm.supervise import default_log_path
    from compat.shared.host_memory import size_host_memory

    started = time.monotonic()

    def say(text, stream=None):
        print(f"confirm: [{time.monotonic() - started:6.1f} s] {text}", file=stream or sys.stderr, flush=True)

    largest = max(len(c) for c in spec.calls)
    memory = size_host_memory(args.checkpoint, args.dtype, spec.engine["max_model_len"], largest,
                              args.gpu_memory_utilization)
    log_path = spec.log_path or default_log_path()
    say(f"vLLM's log: {log_path}")
    if memory and memory.get("source", "").startswith("sized"):
        say(f"host memory: VLLM_CPU_KVCACHE_SPACE={memory['VLLM_CPU_KVCACHE_SPACE']} GiB ({memory['source']})")
    spec = replace(spec, log_path=log_path, progress=say, report=Report(args.output),
                   extra={**spec.extra, **({"host_memory": memory} if memory else {})}, **hooks)
    try:
        return run_spec(spec)["exit_code"]
    except SpecError as exc:
        raise UsageError(str(exc)) from None
