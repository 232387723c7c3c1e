"""compat confirm's runs as the contract tests read them: its real command line (spawned workers, as a user's),
its vllm-extract run, and its short runs (PP refused, no reference, a killed worker, a killed worker while busy)
in children forked from the harness.  Every run has its own output file, vLLM log and report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.contract import confirm_api, processes
from tests.contract.variants import fresh_generator

#: --prompts for the vllm-extract run: token ids, a JSON list, text, and forced text; then eight generated prompts
#: of up to 300 tokens, which the batch-of-33 invariant call (filled from the file) reaches, so the extract
#: reference is held against HF on long prompts too
EXTRACT_PROMPTS = ("# token ids and text\n5 6 7 8 9 10\n[11, 12, 13]\nw1 w2 w3 w4\ntext: 1 2\n"
                   + "".join(" ".join(map(str, p)) + "\n" for c in confirm_api.make_calls((8,)) for p in c))
#: the worker-death run: the kill lands right after "engine started", inside the first call
DEATH_CALLS = "33,11"
#: the module speculators' generator names as its worker_extension_cls (0.3.0 and 0.4.x)
WORKER_EXTENSION = "speculators.data_generation.custom_worker"


def _confirm_main(settings, argv, tee=None, imported=None) -> int:
    """compat confirm's own main() in this (forked) process, its workers forked from here too.

    ``tee``: also save what vLLM's extract_hidden_states reference returned (refs and meta) there.
    ``imported``: a file written once the run has read every speculators file it uses: the generator and the
    worker extension its forked workers inherit are imported first, and compat confirm ties its report to the
    files on disk right after its own import of the generator, which writes the file.
    """
    import importlib
    import importlib.util

    from tests.contract.generator_runs import with_workers

    with_workers(fresh_generator(), "fork", settings.on_cpu)
    if importlib.util.find_spec(WORKER_EXTENSION) is not None:
        importlib.import_module(WORKER_EXTENSION)
    on_tied = (lambda: Path(imported).write_text("read\n")) if imported is not None else None
    return confirm_api.main(argv, on_tied=on_tied, tee=tee)


def _fork_confirm(settings, out_dir: Path, name: str, argv, **kwargs) -> processes.Child:
    return processes.fork(lambda: _confirm_main(settings, argv, **kwargs), out_dir / f"{name}.out",
                          name=f"confirm-{name}")


def start(settings, out_dir: Path) -> dict:
    """The two long compat confirm runs, started now beside the rest (they read the full set on disk, which
    stays until both have read every file they use: ``wait_until_read``): the real command line,
    ``python -m compat.confirm`` with the lane's installed kit, its worker spawned by vLLM as a user's is; and
    --reference vllm-extract with a prompts file (vLLM >= 0.17), whose reference child starts two spawned vLLM
    processes of its own."""
    out_dir.mkdir(parents=True, exist_ok=True)
    started = {}
    with open(out_dir / "cli.stdout", "wb") as stdout, open(out_dir / "cli.stderr", "wb") as stderr:
        started["cli"] = subprocess.Popen(
            [sys.executable, "-m", "compat.confirm", "--model", settings.model, "--log", str(out_dir / "cli.vllm.log"),
             "--json-file", str(out_dir / "cli.json"), "--calls", "1,11", *settings.gpu_share_args()], cwd="/",
            stdout=stdout, stderr=stderr, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    started["cli_started"] = time.monotonic()
    if settings.one_engine_at_a_time:
        started["cli"].wait()
    if confirm_api.extract_unavailable() is None:
        prompts, report, tee = out_dir / "prompts.txt", str(out_dir / "extract.json"), str(out_dir / "extract.pt")
        prompts.write_text(EXTRACT_PROMPTS)
        argv = ["--model", settings.model, *settings.gpu_share_args(), "--reference", "vllm-extract", "--prompts",
                str(prompts), "--calls", "1,3", "--report", report, "--log", str(out_dir / "extract.vllm.log")]
        marker = out_dir / "extract.imported"
        child = _fork_confirm(settings, out_dir, "extract", argv, tee=tee, imported=marker)
        started["extract"] = (child, {"report": report, "tee": tee})
        started["extract_imported"] = marker
        if settings.one_engine_at_a_time:
            processes.wait(child.pid, 600)
    return started


def wait_until_read(out_dir: Path, started: dict, limit_s=600) -> float:
    """Block until the two ``start`` runs have read every speculators file they use, so the files on disk may
    change under them: the command line once its engine started (its spawned worker imported the worker
    extension; compat confirm ties its report to the files when it imported them), the extract run once its
    marker says so.  A run that ended meanwhile reads nothing more.  Returns the seconds waited."""
    t0 = time.monotonic()
    deadline = t0 + limit_s
    cli, stderr = started["cli"], out_dir / "cli.stderr"
    while cli.poll() is None and "engine started" not in stderr.read_text(errors="replace"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"compat confirm's command line did not start its engine within {limit_s} s")
        time.sleep(0.1)
    if "extract" in started:
        pid, marker = started["extract"][0].pid, started["extract_imported"]
        while not marker.exists() and processes.wait(pid, 0) is None:  # wait keeps the exit code of one that ended
            if time.monotonic() > deadline:
                raise RuntimeError(f"the vllm-extract run did not import speculators within {limit_s} s")
            time.sleep(0.1)
    return round(time.monotonic() - t0, 2)


def _finished(child: processes.Child, limit_s=600, **extra) -> dict:
    code, hung = processes.finish(child, limit_s)
    if hung:
        extra["hung"] = True
    return {"returncode": code, "output": child.output.read_text(errors="replace"),
            "seconds": round(time.monotonic() - child.started, 2), **extra}


def forked_runs(settings, out_dir: Path, reference, layers) -> dict:
    """compat confirm's short runs, main() of the same module in children forked from this process, one at a
    time (their workers forked): --pipeline-parallel-size 2, --reference none, a worker killed after the engine
    started, and a worker killed while the main thread is busy outside vLLM."""
    model, share = settings.model, settings.gpu_share_args()
    runs = {}
    report = str(out_dir / "pp.json")
    runs["pp"] = _finished(_fork_confirm(settings, out_dir, "pp", [
        "--model", model, *share, "--pipeline-parallel-size", "2", "--report", report, "--log",
        str(out_dir / "pp.vllm.log")]), report=report)
    report = str(out_dir / "none.json")
    runs["none"] = _finished(_fork_confirm(settings, out_dir, "none", [
        "--model", model, *share, "--reference", "none", "--calls", "1", "--layers", "1,2", "--report", report,
        "--log", str(out_dir / "none.vllm.log")]), report=report)
    runs["death"] = _death_run(settings, out_dir)
    runs["busy"] = _busy_run(settings, out_dir, reference, layers)
    return runs


def finish(out_dir: Path, started: dict, runs: dict) -> dict:
    """The two runs ``start`` began, waited for and added to ``runs``."""
    if "extract" in started:
        child, extra = started["extract"]
        runs["extract"] = _finished(child, **extra)
    cli = started["cli"]
    cli.wait(timeout=900)
    runs["cli"] = {"log": str(out_dir / "cli.vllm.log"), "json_file": str(out_dir / "cli.json"),
                   "returncode": cli.returncode, "stdout": (out_dir / "cli.stdout").read_text(errors="replace"),
                   "stderr": (out_dir / "cli.stderr").read_text(errors="replace"),
                   "seconds": round(time.monotonic() - started["cli_started"], 2)}
    return runs


def _death_run(settings, out_dir: Path) -> dict:
    """compat confirm whose worker gets SIGKILL right after "engine started": what it said, when it ended."""
    import psutil

    log, doc = str(out_dir / "death.vllm.log"), str(out_dir / "death.json")
    child = _fork_confirm(settings, out_dir, "death", ["--model", settings.model, *settings.gpu_share_args(), "--log",
                                                       log, "--json-file", doc, "--calls", DEATH_CALLS])
    pid, out = child.pid, child.output
    run = {"log": log, "json_file": doc, "confirm_pid": pid}
    deadline = time.monotonic() + 600
    while "engine started" not in out.read_text(errors="replace"):
        if time.monotonic() > deadline or processes.wait(pid, 0) is not None:
            processes.finish(child, 0)
            return {**run, "returncode": None, "output": out.read_text(errors="replace"),
                    "error": "confirm ended (or hung) before the engine started"}
        time.sleep(0.05)
    everyone = psutil.Process(pid).children(recursive=True)
    workers = [p for p in everyone if "Worker" in " ".join(p.cmdline())]
    run["workers"] = [p.pid for p in workers]
    if not workers:
        processes.finish(child, 0)
        return {**run, "returncode": None, "output": out.read_text(errors="replace"), "error": "no vLLM worker"}
    victim = workers[0]
    victim.send_signal(9)
    killed_at = time.monotonic()
    code = processes.wait(pid, 120)
    run["took"] = round(time.monotonic() - killed_at, 2)
    if code is None:
        processes.finish(child, 0)
    time.sleep(0.5)
    run.update(returncode=code, victim=victim.pid, output=out.read_text(errors="replace"),
               left=[p.pid for p in everyone if p.is_running() and p.status() != psutil.STATUS_ZOMBIE])
    return run


def _busy_run(settings, out_dir: Path, reference, layers) -> dict:
    """A worker killed while the main thread is busy outside vLLM (in ``after``): vLLM's own monitor has no
    waiting call to cancel, only confirm's watch can end the run."""
    mark, doc_path, log = out_dir / "busy.killed.json", str(out_dir / "busy.json"), str(out_dir / "busy.vllm.log")

    def target():
        import psutil

        from tests.contract.generator_runs import with_workers

        module = fresh_generator()
        with_workers(module, "fork", settings.on_cpu)

        def after(gen):
            victim = gen.executor.workers[0].proc
            mark.write_text(json.dumps({"pid": victim.pid, "killed_at": time.time()}))
            psutil.Process(victim.pid).kill()
            time.sleep(600)  # busy elsewhere: without the watch, the run waits all of it

        # death_grace_s: vLLM's own error cannot come here (nothing waits on it): the watch steps in; the report
        # prints and writes the dead worker's document, then ends the process
        out = confirm_api.run_generator(module, settings.model, confirm_api.make_calls((1,)), reference, layers,
                                        settings.max_batched, after=after, log_path=log, death_grace_s=2.0,
                                        report=confirm_api.Report(confirm_api.Output(json_file=doc_path)),
                                        engine=settings.gpu_share_engine())
        print("RETURNED", json.dumps(out.get("error"), default=str))
        return 3

    child = processes.fork(target, out_dir / "busy.out", name="confirm-busy")
    code, hung = processes.finish(child, 600)
    ended = time.time()
    return {"returncode": code, "ended": ended, "output": child.output.read_text(errors="replace"), "mark": str(mark),
            "json_file": doc_path, "log": log, "hung": hung}
