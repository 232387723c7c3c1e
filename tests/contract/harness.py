"""Drive speculators' real generator on real vLLM with a tiny local model: the contract cell as a short list of
declared runs, executed by one runner.

Runs inside a lane (``python -m tests.contract.harness ...``) and writes a JSON report; the contract tests only
read reports (and the files each run left), so every engine start is shared by as many checks as possible.

Layer-index semantics (what "correct hidden states" means here, README "Layer semantics"): generator layer id
``k`` is the output of decoder layer ``k`` (hidden + residual, before the final norm) == HF
``output_hidden_states[k + 1]``; compat confirm judges each run (``compare``) and every run saves its raw
captures for the tests' own comparator (tests/contract/comparator.py).

A run (``Run``) names the tree it imports (the installed files, or a tree the kit writes and the runner copies
beside the install: tests/contract/variants.py), the process it runs in (a child forked from the harness, this
process, or a new interpreter), how vLLM starts its worker (forked from that child: ~2 s per engine start
instead of ~10 s of spawned imports; spawned; or as the platform chooses), its calls and what it observes
(tests/contract/observers.py).  ``Runner`` gives every run its own directory entry: output, vLLM log, result and
captures, each headed by the run's name, so no run reads a neighbour's text.

Modes:
    --mode cell       a whole contract cell (``--parts``), one HF reference.  First the full set on disk: compat
                      confirm's real command line and its vllm-extract run start (tests/contract/confirm_runs.py),
                      and bf16 and confirm's short runs fill the time until both have read their files (and p37's
                      exit run, tests/contract/exit_run.py, a new interpreter started beside them, has generated).
                      Then the kit writes each tree the cell needs, and the runs go side by side on two cores: the spawned
                      ones (the patches that cannot show here left out together, and the thread-binding proof:
                      spawning is part of their claim) in the background, the patched run with the runtime checks
                      and the forked proofs two at a time.  The patched engine also serves each patch whose edits
                      lie only in ``generate()``.  ``--parts proofs`` alone is the leave-one-out over the needed
                      patches (``--only``), the platform's workers, one run at a time (mla_harness's TP/PP/MLA).
    --mode proofs     the same as ``--mode cell --parts proofs``.
    --mode installed  one run of the installed files (or of a variant's copy, ``--variant DIR``) in this process:
                      a forked proof that failed only because the harness had asked torch about CUDA runs again
                      this way, in a new interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from tests.contract import confirm_api, confirm_runs, exit_run, generator_runs, observers, processes, variants  # noqa: E402
from tests.contract.amx_host import bf16_steer, with_block_size  # noqa: E402
from tests.contract.settings import Settings, resolve  # noqa: E402

#: the calls of each generator run of a cell (prompts per call): the proofs' batches cross 11 and 32
PROOF_SIZES = (1, 11, 33)
CELL_SIZES = {"pristine": (1,), "patched": (1, 11, 33, 11), "proofs": PROOF_SIZES, "bf16": (11,)}
ROOT = str(Path(__file__).resolve().parents[2])


# -- the declared runs ----------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One engine start of the cell."""

    key: str
    tree: str = "installed"  # the installed files, or the key of a tree the kit writes (``Tree``)
    process: str = "child"  # "child": forked from the harness; "here": this process; "fresh": a new interpreter
    workers: str | None = "fork"  # how vLLM starts the worker: "fork", "spawn", None (the platform's choice)
    calls: str = "proofs"  # a CELL_SIZES key
    dtype: str = "float32"
    observe: Callable | None = None  # the live engine -> facts (tests/contract/observers.py)
    vllm_binding: bool = False  # vLLM binds the worker's threads as by default (no VLLM_CPU_* binding variable)
    left_out: tuple = ()  # the patches this run's tree leaves out (a proof)
    block_size: int | None = None  # the generator's CacheConfig block size (None: the platform's; amx_host.py)
    background: bool = False  # started as soon as its tree is written, collected at the end
    serves: dict = field(default_factory=dict, hash=False)  # patch id -> a generate()-only variant it also drives


@dataclass(frozen=True)
class Tree:
    """A tree of speculators the kit writes with its own command line, then copied beside the install."""

    key: str
    kit_args: tuple


def trees_for(parts, singles, together, binding) -> list[Tree]:
    """What the kit writes, in order: the spawned proofs' trees first (their runs start at once), pristine
    (--revert), reverted (an apply, then --revert), each single proof (--exclude)."""
    exclude = lambda ids: tuple(a for pid in ids for a in ("--exclude", pid))  # noqa: E731
    trees = []
    if binding:
        trees.append(Tree(observers.BINDING_PATCH, exclude([observers.BINDING_PATCH])))
    if together:
        trees.append(Tree("+".join(together), exclude(together)))
    if "pristine" in parts:
        trees.append(Tree("pristine", ("--revert", "--force")))
    if "reverted" in parts:
        trees.append(Tree("reverted", ("--revert",)))
    trees += [Tree(pid, exclude([pid])) for pid in singles
              if not (binding and pid == observers.BINDING_PATCH)]
    return trees


def declare(parts, singles, together, binding, shared, proofs_workers="fork") -> list[Run]:
    """The cell's engine starts after the trees are written, in the order they start (two at a time on CPU)."""
    runs = []
    if binding:  # OpenMP binds a worker's threads from the environment vLLM sets before the worker starts
        runs.append(Run(observers.BINDING_PATCH, tree=observers.BINDING_PATCH, workers="spawn",
                        observe=observers.observe_thread_binding, vllm_binding=True,
                        left_out=(observers.BINDING_PATCH,), background=True))
    if "patched" in parts:
        runs.append(Run("patched", calls="patched", observe=observers.observe_engine, serves=shared))
    runs += [Run(pid, tree=pid, workers=proofs_workers, left_out=(pid,)) for pid in singles
             if pid not in shared and not (binding and pid == observers.BINDING_PATCH)]
    if together:  # spawned: what the platform does is one of the facts this run observes
        key = "+".join(together)
        runs.append(Run(key, tree=key, workers="spawn" if proofs_workers else None, left_out=tuple(together),
                        observe=observers.observe_reasons_and_binding if binding else observers.observe_reasons,
                        vllm_binding=binding, background=proofs_workers is not None))
    runs += [Run(tree, tree=tree, calls="pristine") for tree in ("pristine", "reverted") if tree in parts]
    return runs


# -- the runner ------------------------------------------------------------------------


def safe(key: str) -> str:
    """A run's key as a file name (a together key joins several patch ids)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", key)[:80]


@dataclass(frozen=True)
class RunFiles:
    """One run's own files: whatever it prints, vLLM's log, its result, its raw captures."""

    output: Path
    log: Path
    result: Path
    captures: Path


class Runner:
    """Starts declared runs and collects their results; every run gets its own ``RunFiles``."""

    def __init__(self, settings: Settings, reference, layers, calls: dict, root: Path):
        self.settings, self.reference, self.layers, self.calls = settings, reference, layers, calls
        self.root, self.overlays, self.count = root, {}, 0
        root.mkdir(parents=True, exist_ok=True)

    def files(self, key: str) -> RunFiles:
        self.count += 1
        stem = self.root / f"{self.count:02d}-{safe(key)}"
        files = RunFiles(Path(f"{stem}.out"), Path(f"{stem}.vllm.log"), Path(f"{stem}.json"),
                         Path(f"{stem}.captures.pt"))
        for path in (files.log, files.output):
            processes.header(path, key)
        return files

    def write(self, tree: Tree) -> str:
        """The kit writes ``tree``; the result is copied beside the install for the runs that import it."""
        variants.write(*tree.kit_args)
        self.overlays[tree.key] = variants.snapshot(self.root / "trees", f"t{len(self.overlays)}")
        return self.overlays[tree.key]

    def start(self, run: Run):
        """Start ``run`` in its process; ``collect`` gives its result."""
        files = self.files(run.key)
        overlay = self.overlays.get(run.tree)
        if run.process == "fresh":
            argv = ["-m", "tests.contract.harness", "--model", self.settings.model, "--out", str(files.result),
                    "--mode", "installed", "--calls", ",".join(map(str, CELL_SIZES[run.calls])), "--variant", overlay]
            if run.observe is observers.observe_reasons or run.observe is observers.observe_reasons_and_binding:
                argv += ["--observe", "reasons"]
            return run, processes.interpreter(argv, files.output, files.result, ROOT)
        if run.process == "here":
            return run, self.execute(run, overlay, files)
        assert not variants.speculators_imported(), "the harness imported speculators: a child would inherit it"
        return run, processes.fork(lambda: self.execute(run, overlay, files, child=True), files.output,
                                   files.result)

    def collect(self, started) -> dict:
        run, handle = started
        if isinstance(handle, dict):
            return handle
        doc = processes.result_of(handle)
        if run.process == "fresh" and "run" in doc:
            doc = {**doc["run"], "in_fresh_process": True}
        return doc

    def run(self, run: Run) -> dict:
        return self.collect(self.start(run))

    def execute(self, run: Run, overlay: str | None, files: RunFiles, child: bool = False) -> dict:
        """The run itself, in its process: the generator imported from the files on disk or from its tree's copy,
        compat confirm's run with this run's files, what it observes, where its workers imported speculators."""
        if run.vllm_binding:  # bind as vLLM does by default ("auto"): only in this process, before vLLM reads them
            for name in observers.BINDING_VARS:
                os.environ.pop(name, None)
        try:
            module = variants.use(overlay) if overlay is not None else variants.fresh_generator()
        except BaseException as exc:  # noqa: BLE001 - a variant that does not import: its proof reads why
            return self._done(run, files, {"ok": False, "stage": "import", "calls": [],
                                           "error": confirm_api.error_report(exc)})
        if run.block_size is not None:
            module = with_block_size(module, run.block_size)
        seen = {}

        def after(gen):
            if overlay is not None:  # a run that got this far: where its workers imported speculators from
                seen["workers"] = gen.executor.collective_rpc(observers.speculators_file)
            if run.serves:
                seen["shared"], seen["rest"] = generator_runs.shared_proofs(
                    self.settings, gen, run.serves, self.calls["proofs"], self.reference, self.layers, files.log,
                    lambda pid: files.captures.with_name(f"{files.log.name[:-len('.vllm.log')]}.{safe(pid)}.captures.pt"))
            return run.observe(gen) if run.observe is not None else None

        doc = generator_runs.run(self.settings, module, self.calls[run.calls], self.reference, self.layers, files,
                                 after=after, dtype=run.dtype, workers=run.workers)
        if run.observe is None:
            doc.pop("runtime", None)
        if overlay is not None:
            doc["speculators_from"] = {"variant": overlay, "driver": observers.speculators_file(),
                                       "workers": seen.get("workers")}
        if run.serves:
            doc["shared_proofs"], doc["shared_rest"] = seen.get("shared", {}), seen.get("rest", list(run.serves))
        if run.observe is observers.observe_engine and doc.get("block_size"):
            doc["request_hashing"] = observers.observe_request_hashing(doc["block_size"])
        if child:
            doc["forked_from_harness"] = generator_runs.forked_after_cuda_touch(doc)
        return self._done(run, files, doc)

    @staticmethod
    def _done(run: Run, files: RunFiles, doc: dict) -> dict:
        doc.update(run_key=run.key, output=str(files.output), log=str(files.log), left_out=list(run.left_out))
        return doc


# -- the cell ----------------------------------------------------------------------------


def cell(settings: Settings, parts, together=(), only=None, sizes=None) -> dict:
    """One process for a contract cell, one reference; every generator run as declared (``declare``).

    On CUDA (``one_engine_at_a_time``) each run is waited for at once, and the reference is computed in each
    child (``ReferenceInEachChild``)."""
    layers = list(range(confirm_api.num_layers(settings.model)))
    full = "patched" in parts
    doc = {"layers": layers, "rtol": settings.rtol, "tolerance": settings.tolerance,
           "device_type": settings.device_type, "parts": list(parts), "timings": {}}
    if full:
        from tests.contract import warmups

        doc["ready_after_s"] = round(time.time() - warmups.process_started(), 2)
        doc["static_api"] = observers.observe_static_api()  # before speculators is imported (annotation probe)
    used = set(parts) | ({"pristine"} if "reverted" in parts else set())  # the reference covers these calls only
    calls = {part: confirm_api.make_calls(size) for part, size in {**CELL_SIZES, **(sizes or {})}.items()
             if part in used}
    prompts = list({tuple(p): p for part in calls for c in calls[part] for p in c}.values())
    started = time.monotonic()
    side_by_side = not settings.one_engine_at_a_time
    if side_by_side:
        reference = settings.hf_reference(prompts, layers)
    else:
        reference = generator_runs.ReferenceInEachChild(settings, prompts, layers)
        doc["hf_reference"] = "computed in each child (CUDA: the harness forks, and must not run HF first)"
    doc["hf_seconds"] = round(time.monotonic() - started, 2)
    if full and settings.on_cpu:
        from tests.contract import warmups

        doc["model_info"] = warmups.warm_model_info(settings.model)
        doc["inductor_isa"] = warmups.settle_inductor_isa()
    runner = Runner(settings, reference, layers, calls,
                    Path(tempfile.mkdtemp(prefix="runs-", dir=settings.out_dir)))
    doc["runs_dir"] = str(runner.root)
    clock = [time.monotonic()]
    cell_started = clock[0]

    def lap(name):
        now = time.monotonic()
        doc["timings"][name] = round(now - clock[0], 2)
        clock[0] = now

    # 1. the full set on disk: compat confirm's command line and its vllm-extract run start, and the runs that
    # read the full set (bf16, confirm's short runs) fill the time until both have read their files
    variants.write()
    confirm_dir = runner.root / "confirm"
    full_set = variants.stamps()
    confirm_started = confirm_runs.start(settings, confirm_dir) if "confirm" in parts else None
    # p37's exit run goes with the proofs (it is one); its engine keeps dtype 'auto', as a user's script does
    # a bfloat16 engine at the platform's block size dies on an AMX host with vllm-cpu 0.12-0.16 (amx_host.py):
    # there the bf16 run takes block size 16 and the exit run float32, each saying so in its report
    steer = bf16_steer() if settings.on_cpu else {}
    not_run = steer.get("not_run", "")
    exit_started = None
    if full and "proofs" in parts:
        if not_run:
            doc["exit"] = {"not_run": not_run}
        else:
            exit_started = exit_run.start(settings.model, runner.root / "exit", dtype="float32" if steer else None)
            if steer:
                exit_started["steered"] = {"dtype": "float32", "why": steer["why"]}
            if settings.one_engine_at_a_time:
                exit_run.wait_until_read(exit_started)
    lap("confirm started")
    if "bf16" in parts and not_run:
        doc["bf16"] = {"not_run": not_run}
    elif "bf16" in parts:
        doc["bf16"] = {"run": runner.run(Run("bf16", calls="bf16", dtype="bfloat16",
                                             block_size=steer.get("block_size")))}
        if steer:
            doc["bf16"]["steered"] = {"block_size": steer["block_size"], "why": steer["why"]}
        lap("bf16")
    if confirm_started is not None:
        confirm = confirm_runs.forked_runs(settings, confirm_dir, reference, layers)
        lap("confirm's short runs")
        doc["timings"]["waited for confirm to read its files"] = confirm_runs.wait_until_read(confirm_dir,
                                                                                             confirm_started)
        clock[0] = time.monotonic()
    if exit_started is not None:  # p37's exit run read the full set too: it must have generated first
        waited = time.monotonic()
        exit_run.wait_until_read(exit_started)
        doc["timings"]["waited for the exit run to generate"] = round(time.monotonic() - waited, 2)
        clock[0] = time.monotonic()
    doc["full_set"] = {"when_confirm_started": full_set, "when_it_had_read_them": variants.stamps()}

    # 2. the kit writes each tree in turn, each copied beside the install; the background runs start as soon as
    # theirs is copied
    surface, decisions = variants.needed_decisions()
    needed = [d.patch.id for d in decisions]
    wanted = lambda pid: pid in needed and (only is None or pid in only)  # noqa: E731
    together = [pid for pid in together if wanted(pid)] if "proofs" in parts else []
    singles = [pid for pid in needed if wanted(pid) and pid not in together] if "proofs" in parts else []
    # the spawned runs also observe how vLLM binds their worker's threads by default (test_thread_binding.py): the
    # binding proof without its patch, the together run with it
    binding = "binding" in parts and observers.BINDING_PATCH in singles and bool(together)
    full_files = variants.files(sorted({rel for d in decisions for rel in d.patch.files(d.variant)}))
    shared, background = {}, {}
    runs = declare(parts, singles, together, binding, {}, "fork" if full else None)
    try:
        for tree in trees_for(parts, singles, together, binding):
            if tree.key == "reverted":
                variants.write()
                applied = variants.hashes()
            runner.write(tree)
            if tree.key == "pristine":
                doc["pristine"] = {"files": variants.hashes()}
            elif tree.key == "reverted":
                doc["reverted"] = {"applied_files": applied, "files": variants.hashes()}
            elif tree.key in singles and full and not any(r.background and r.tree == tree.key for r in runs):
                variant = variants.files(full_files)
                if variants.generate_only(full_files, variant):
                    from compat.layout import GENERATOR

                    shared[tree.key] = variant[GENERATOR]
            for run in runs:
                if run.background and run.tree == tree.key:
                    background[run.key] = runner.start(run)
                    if not side_by_side:
                        background[run.key] = runner.collect(background[run.key])
    finally:
        variants.write()  # the full set on disk again: the patched run imports it
    lap("trees written")

    # 3. side by side on CPU: the patched run first (the longest), then the forked proofs, pristine and reverted,
    # two children at a time (one for the platform's own workers), while the background runs go on
    runs = declare(parts, singles, together, binding, shared, "fork" if full else None)
    results, running = {}, []
    limit = (1 if full else 0) if side_by_side else 0

    def collect_down_to(n):
        while len(running) > n:
            started_run = running.pop(0)
            results[started_run[0].key] = runner.collect(started_run)
            lap(f"collected {started_run[0].key}")

    for run in runs:
        if run.background:
            continue
        collect_down_to(limit)
        running.append(runner.start(run))
    collect_down_to(0)
    patched = results.pop("patched", None)
    shared_runs = patched.pop("shared_proofs", {}) if patched else {}
    for pid in (patched.pop("shared_rest", []) if patched else []):  # the patched engine could not vouch for them
        results[pid] = runner.run(Run(pid, tree=pid, left_out=(pid,)))
    for key, started_run in background.items():
        results[key] = started_run if isinstance(started_run, dict) else runner.collect(started_run)
    lap("waited for the background runs")
    for key, result in list(results.items()):  # a forked proof that was CUDA-touched: again in a new interpreter
        if result.get("forked_from_harness") == "cuda-touched":
            declared = next(r for r in runs if r.key == key)
            again = runner.run(Run(key, tree=declared.tree, process="fresh", observe=declared.observe,
                                   left_out=declared.left_out))
            results[key] = {**again, "left_out": list(declared.left_out), "forked_run": result}
    lap("waited for the fresh processes")

    if patched is not None:
        doc["patched"] = {"run": patched, "request_hashing": patched.pop("request_hashing", None)}
        if doc["patched"]["request_hashing"] is None:
            del doc["patched"]["request_hashing"]
    for tree in ("pristine", "reverted"):
        if tree in results:
            doc[tree]["run"] = results.pop(tree)
    if "proofs" in parts:
        report = {"surface": surface.fingerprint(), "needed": needed, "runs": {}, "shared_engine": sorted(shared_runs)}
        for pid in [*singles, *(["+".join(together)] if together else [])]:
            if pid in shared_runs:
                report["runs"][pid] = shared_runs[pid]
            elif pid in results:
                report["runs"][pid] = results[pid]
        report["all_files_sha256"] = variants.sha256_of(decisions)
        doc["proofs"] = report
    if confirm_started is not None:
        doc["confirm"] = confirm_runs.finish(confirm_dir, confirm_started, confirm)
        lap("waited for confirm's command line and vllm-extract run")
    if exit_started is not None:
        doc["exit"] = {**exit_run.finish(exit_started), **({"steered": exit_started["steered"]}
                                                            if "steered" in exit_started else {})}
        lap("waited for the exit run")
    if binding:
        together_run = doc["proofs"]["runs"]["+".join(together)]
        doc["binding"] = {"left_out": doc["proofs"]["runs"][observers.BINDING_PATCH],
                          "patched": {**together_run, "runtime": (together_run.get("runtime") or {}).get("binding")}}
    doc["timings"]["side by side"] = round(time.monotonic() - cell_started, 2)
    variants.write()  # the lane is left with every needed patch, whatever ran
    return doc


def installed(settings: Settings, sizes, variant=None, observe=None, runtime_checks=False, dtype="float32") -> dict:
    """One run of the installed files (or of ``variant``'s copy) in this process, the platform's workers."""
    layers = list(range(confirm_api.num_layers(settings.model)))
    doc = {"layers": layers, "rtol": settings.rtol, "tolerance": settings.tolerance,
           "device_type": settings.device_type}
    if runtime_checks:
        doc["static_api"] = observers.observe_static_api()  # before speculators is imported (annotation probe)
    calls = {"run": confirm_api.make_calls(sizes)}
    started = time.monotonic()
    reference = settings.hf_reference([p for call in calls["run"] for p in call], layers)
    doc["hf_seconds"] = round(time.monotonic() - started, 2)
    runner = Runner(settings, reference, layers, calls, Path(tempfile.mkdtemp(prefix="runs-", dir=settings.out_dir)))
    if variant is not None:
        runner.overlays["variant"] = variant
    observe = observers.observe_engine if runtime_checks else observers.observe_reasons if observe else None
    run = runner.run(Run("installed" if variant is None else "variant", tree="installed" if variant is None
                         else "variant", process="here", workers=None, calls="run", dtype=dtype, observe=observe))
    if "request_hashing" in run:
        doc["request_hashing"] = run.pop("request_hashing")
    doc["run"] = run
    return doc


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--mode", choices=("installed", "proofs", "cell"), default="installed")
    parser.add_argument("--parts", default="pristine,reverted,patched,bf16,proofs",
                        help="--mode cell: what to run")
    parser.add_argument("--calls", default="1,11,33,11", help="--mode installed and proofs: prompts per call")
    parser.add_argument("--max-batched-tokens", type=int, default=96)
    parser.add_argument("--dtype", default="float32", help="the generator's model dtype (bfloat16 to prove the tolerance)")
    parser.add_argument("--only", action="append", help="proofs: leave out only these patches")
    parser.add_argument("--together", action="append", default=[],
                        help="patch ids left out together in one run that observes why they cannot show here")
    parser.add_argument("--runtime-checks", action="store_true")
    parser.add_argument("--variant", metavar="DIR",
                        help="--mode installed: import speculators from this copy of a variant (variants.snapshot)")
    parser.add_argument("--observe", choices=("reasons",), help="--mode installed: observe why (observe_reasons)")
    return parser


def main(argv=None, rtol: float | None = None, **hooks) -> int:
    """``hooks``: Settings' reference, wrap and facts (tests/contract/mla_harness.py); ``rtol`` its own bound."""
    args = parser().parse_args(argv)
    settings = resolve(args.model, Path(args.out).resolve().parent, rtol=rtol, max_batched=args.max_batched_tokens,
                       **hooks)
    import torch

    torch.set_num_threads(1)  # the parent only schedules and compares: two threads spin against the worker's
    started = time.monotonic()
    sizes = tuple(int(n) for n in args.calls.split(","))
    if args.mode == "installed":
        doc = installed(settings, sizes, args.variant, args.observe, args.runtime_checks, args.dtype)
    elif args.mode == "proofs":
        doc = cell(settings, ["proofs"], args.together, args.only, {"proofs": sizes})
    else:
        doc = cell(settings, args.parts.split(","), args.together, args.only)
    doc["seconds"] = round(time.monotonic() - started, 2)
    Path(args.out).write_text(json.dumps(doc, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
