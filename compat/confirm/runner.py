"""``run(spec) -> result``: the one entry of ``compat confirm`` that the command line and the tests share.

A ``RunSpec`` says what to run (checkpoint, calls, layers, reference, dtype, bound, engine arguments) and what
to hook in (observe the live engine, learn when the files were read or the reference was built, print and write
the report).  ``run`` imports the installed generator, builds the reference, drives the generator through every
call and returns the report document, whose ``verdict`` is OK, WRONG, INCOMPLETE or ERROR and whose ``exit_code`` is the
command line's.  It never raises for a failed run (the document carries the error); it raises ``SpecError`` only
for a spec this generator cannot run, before any engine starts.
"""

from __future__ import annotations

import importlib
import inspect
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from compat.checkpoint import num_layers
from compat.confirm import reference as references
from compat.confirm import supervise
from compat.confirm.compare import Reference
from compat.confirm.report import Report, device_names, exit_code, tie_to_files
from compat.shared.tolerance import RTOL, TOLERANCE_RULE
from compat.report import PATCH_PROBLEM
from compat.vllm_log import root_cause

GEN_MOD = "speculators.data_generation.vllm_hidden_states_generator"


class SpecError(ValueError):
    """A spec this generator cannot run (e.g. pipeline parallelism it takes no argument for); nothing ran."""


@dataclass
class RunSpec:
    model: str
    calls: list  # prompts (token ids) per call, all on one generator
    layers: list | None = None  # generator layer ids; None: every layer
    reference: str | Reference | tuple = "hf"  # a name of compat.confirm.reference.BUILDERS, or ready tensors
    dtype: str = "float32"
    rtol: float | None = None  # None: automatic (compat.shared.tolerance.choose)
    engine: dict = field(default_factory=dict)  # the generator's keyword arguments (tensor_parallel_size, ...)
    max_batched_tokens: int | None = None
    checks: dict | None = None  # {"batch": i, "repeat": j}: which calls are the invariant calls
    hidden_size: int | None = None
    trust_remote_code: bool = False
    generator: object = None  # the generator module; None: import speculators' as installed
    log_path: str | Path | None = None  # vLLM's log; None: a new file under the cache's logs/
    verbose: bool = False  # also stream vLLM's log to the terminal
    progress: Callable | None = None  # progress(text, stream=None): the kit's own lines
    after: Callable | None = None  # after(gen): observe the live engine before shutdown -> doc["runtime"]
    on_death: Callable | None = None  # on_death(doc) from the watch thread; must end the process
    death_grace_s: float = supervise.DEATH_GRACE_S
    report: Report | None = None  # print and write the report (a dead worker's too, then exit)
    tie: bool = False  # tie the report to the installed files, devices and timings
    on_imported: Callable | None = None  # on_imported(doc): the generator is imported, the files tied
    on_reference: Callable | None = None  # on_reference(reference, meta): the reference is built
    extra: dict = field(default_factory=dict)  # fields the report carries as given (prompts, calls_requested ...)

    @property
    def reference_kind(self) -> str:
        return self.reference if isinstance(self.reference, str) else "given"


def run(spec: RunSpec) -> dict:
    """The report document of one confirm run (see the module docstring)."""
    started = time.monotonic()
    log_path = Path(spec.log_path) if spec.log_path else supervise.default_log_path()
    say = spec.progress or (lambda text, stream=None: None)
    layers = list(spec.layers) if spec.layers is not None else list(range(num_layers(spec.model)))
    doc_extra = {"reference": spec.reference_kind, "dtype": spec.dtype, **spec.extra}
    timings = doc_extra.setdefault("timings", {})

    def finish(doc: dict) -> dict:
        doc = _finish(doc, spec, layers, doc_extra)
        code = spec.report.emit(doc) if spec.report is not None else exit_code(doc)
        doc["exit_code"] = code
        return doc

    module = spec.generator
    if module is None:
        try:
            with supervise.EngineLog(log_path, echo=spec.verbose):
                module = importlib.import_module(GEN_MOD)
        except BaseException as exc:  # noqa: BLE001
            return finish({"ok": False, "stage": "import", "calls": [], "error": supervise.error_report(exc),
                           "log": str(log_path)})
    if spec.tie:
        tie_to_files(doc_extra)  # the files this process imported, not whatever lies on disk when it ends
    if spec.on_imported is not None:
        spec.on_imported(doc_extra)
    _refuse_what_the_generator_cannot_take(module, spec)
    t0 = time.monotonic()
    try:
        reference = _reference(spec, layers, log_path, say, doc_extra)
    except BaseException as exc:  # noqa: BLE001 - the report carries it
        cause = root_cause(_log_text(log_path))
        return finish({"ok": False, "stage": "reference", "calls": [], "error": supervise.error_report(exc),
                       "log": str(log_path), "root_cause": str(cause) if cause else None})
    timings["reference_s"] = round(time.monotonic() - t0, 2)

    on_death = spec.on_death
    if on_death is None and spec.report is not None:
        def on_death(doc: dict) -> None:
            abort_run(lambda: finish(doc)["exit_code"])

    from compat.confirm.drive import drive

    doc = drive(module, spec, reference, layers, say, log_path, on_death=on_death)
    timings["total_s"] = round(time.monotonic() - started, 2)
    return finish(doc)


def _refuse_what_the_generator_cannot_take(module, spec: RunSpec) -> None:
    params = inspect.signature(module.VllmHiddenStatesGenerator.__init__).parameters
    pp = (spec.engine or {}).get("pipeline_parallel_size", 1)
    if pp > 1 and "pipeline_parallel_size" not in params:
        raise SpecError(f"--pipeline-parallel-size {pp}: this speculators' generator takes no pipeline_parallel_size "
                        f"(its arguments: {', '.join(list(params)[1:])}); nothing was run")


def _reference(spec: RunSpec, layers, log_path: Path, say, doc_extra: dict) -> Reference:
    if not isinstance(spec.reference, str):
        reference, meta = spec.reference, {}
    else:
        request = reference_request(spec, layers, log_path)
        unique = request.prompts
        say({"hf": f"Hugging Face float32 reference for {len(unique)} sequences",
             "vllm-extract": f"vLLM extract_hidden_states reference for {len(unique)} sequences (its own engine "
                             f"start)",
             }.get(spec.reference, f"no reference (--reference {spec.reference}): invariants only"))
        if spec.reference == "hf":
            with supervise.EngineLog(log_path, echo=spec.verbose):
                reference, meta = references.build(spec.reference, request)
        else:
            reference, meta = references.build(spec.reference, request)
        if spec.reference == "vllm-extract":
            doc_extra["reference_run"] = meta
            say(f"reference ready: engine start {meta['engine_start_s']} s, {len(unique)} sequences in "
                f"{meta['generate_s']} s" + (" (CPU shim connector)" if meta.get("cpu_shim") else ""))
    if spec.on_reference is not None:
        spec.on_reference(reference, meta)
    return reference


def reference_request(spec: RunSpec, layers, log_path: Path | None) -> references.ReferenceRequest:
    """What a reference builder gets: the generator's checkpoint, prompts, dtype, parallelism and memory share."""
    engine = spec.engine or {}
    return references.ReferenceRequest(
        model=spec.model, prompts=[p for call in spec.calls for p in call], layers=list(layers), dtype=spec.dtype,
        tp=engine.get("tensor_parallel_size", 1), pp=engine.get("pipeline_parallel_size", 1),
        trust_remote_code=spec.trust_remote_code, max_model_len=engine.get("max_model_len", 512),
        log_path=log_path, engine_args={k: engine[k] for k in ("gpu_memory_utilization",) if k in engine})


def _finish(doc: dict, spec: RunSpec, layers, extra: dict) -> dict:
    """The bound, the extra fields, the tie and the verdict, whichever thread finishes the run."""
    rtol = spec.rtol
    if rtol is None:  # automatic: the bound the run chose (none when the engine never started)
        rtol = (doc.get("precision") or {}).get("rtol")
    if rtol is not None and not doc.get("precision"):
        doc["precision"] = {"rtol": rtol, "source": "--rtol" if spec.rtol is not None else "default"}
    rule = (doc.get("precision") or {}).get("rule")
    doc.update(layers=layers, rtol=rtol,
               tolerance=rule or (TOLERANCE_RULE if rtol == RTOL else f"per layer max|diff| / mean|h_ref| <= {rtol:g}"
                                  if rtol else "not chosen: no engine ran"))
    doc.update({k: v for k, v in extra.items() if k not in doc})
    if spec.tie:
        tie_to_files(doc)
        doc["devices"] = device_names()
        timings = doc.setdefault("timings", {})
        timings.setdefault("engine_start_s", doc.get("engine_start_s"))
        timings.setdefault("generator_s", doc.get("seconds"))
        timings["calls_s"] = [c.get("seconds") for c in doc.get("calls", [])]
    return decide(doc)


def decide(doc: dict) -> dict:
    """The verdict from what the calls found: ERROR (the run failed), WRONG (a layer differed), INCOMPLETE (nothing
    differed, but a layer was not looked at enough: ``not_looked_at`` names it) or OK."""
    missing = [f"call {i}: {what}" for i, call in enumerate(doc.get("calls") or [], 1)
               for what in call.get("not_looked_at") or []]
    if missing:
        doc["not_looked_at"] = missing
    doc["verdict"] = "ERROR" if doc.get("error") else "WRONG" if not doc["ok"] else "INCOMPLETE" if missing else "OK"
    return doc


def _log_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def abort_run(report_and_code: Callable[[], int]) -> None:
    """From the watch thread: report the dead worker, kill the rest of the engine, end the process.

    The main thread may be stuck in vLLM and cannot be asked to return, so this never returns: the report is
    written first, then ``os._exit``.
    """
    code = PATCH_PROBLEM
    try:
        code = report_and_code()
        supervise.kill_engine_processes()
    finally:
        supervise.exit_now(code)
