"""Hidden-state extraction throughput: the patched generator vs vLLM's extract_hidden_states vs HF.

Run it inside a lane whose speculators the kit has patched (``compat apply --verify`` exits 0)::

    export SPECDEC_COMPAT_CACHE=...            # optional: which lanes / model cache
    export VLLM_CPU_KVCACHE_SPACE=1            # 1 GiB of KV cache per engine is plenty
    python3 fixtures/lanes.py run pinned -- python benchmarks/extract_throughput.py
    python3 fixtures/lanes.py run pinned -- python benchmarks/extract_throughput.py --rounds 3 --prompts 16
    python3 fixtures/lanes.py run pinned -- python benchmarks/extract_throughput.py --bind 0-1   # both cores to vLLM

One process times three paths on the same model and the same token-id prompts,
rounds interleaved (generator, extract, hf, generator, extract, hf, ...):

* ``generator``: speculators' ``VllmHiddenStatesGenerator`` as installed (patched
  by the kit), constructed once in this process; a round is one
  ``generate(prompts)`` call, the per-prompt tensors in memory at the end.
* ``extract``: vLLM's own EAGLE-3 ``extract_hidden_states`` path
  (``speculative_config={"method": "extract_hidden_states"}`` plus the hidden
  states connector, on a CPU build compat.confirm.extract's synchronous-copy
  ``CpuHiddenStatesConnector``), one ``LLM`` kept alive for the whole run in a
  child process (this script, ``--extract-child``); a round is one
  ``llm.generate(prompts, max_tokens=1)`` plus waiting for every safetensors file
  to be complete (vLLM's own lock handshake).  Reading the files back is timed
  apart and NOT counted (the figure is "states on disk").
* ``hf``: transformers' float32 model under ``torch.no_grad``, batched forward of
  ``--hf-batch`` prompts with ``output_hidden_states=True``, the captured layers
  cloned per prompt (as the generator returns them).

Both vLLM engines get the generator's scheduler limits (max_num_seqs 32,
max_num_batched_tokens max(8192, max_model_len)), enforce_eager, no prefix
caching, float32.  Engine start (and the HF model load) is measured separately
and excluded from every round; before the rounds every path runs a small
untimed warm-up whose first prompt is compared across the paths (max|diff| /
mean|ref| per captured layer, generator layer k = HF hidden_states[k+1] =
vLLM aux id k+1) so a fast-but-wrong path shows.  Before each timed round the
script sleeps ``--settle`` seconds: vLLM's idle workers busy-poll their queue
for 1 s after the last message, which would steal a core from the next path.

Threads: the generator's engine is vLLM's MultiprocExecutor, which binds its
worker's OpenMP threads by ``VLLM_CPU_OMP_THREADS_BIND`` (default ``auto``:
from vLLM 0.20, on x86 it reserves one core per worker for the driver process,
so on a 2-core machine the worker gets 1 core; the kit's p36 defaults
VLLM_CPU_NUM_OF_RESERVED_CPU=0 inside the generator, so a patched generator's
worker gets every core).  The extract child starts with the environment as it
was before the generator ran, so p36's default does not reach vLLM's own engine.  The extract path's engine also reserves a
core for the KV connector; when that leaves nothing it warns and gives the
worker every core.  HF uses this process's torch threads.  The script prints,
per path, torch.get_num_threads() in every process that computes, the CPU
affinity and OMP_* settings, so the ratio can be read against them.
``--bind`` sets VLLM_CPU_OMP_THREADS_BIND for both vLLM paths.

The model is a random-init Llama built locally with fixtures/tiny_model.py
(fixed seed, word-level tokenizer, nothing downloaded; HF_HUB_OFFLINE=1):
``--hidden`` (multiple of 64; head_dim 64, kv heads = heads / 2, MLP 2x),
``--layers`` decoder layers, vocab 512, cached under
``$SPECDEC_COMPAT_CACHE/models``.  Prompts: ``--prompts`` x ``--tokens`` random
token ids (seed 0).  Captured layers: 2, layers // 2 and layers - 1.

Prints tokens/s per path per round, the median and the best round per path,
and the ratio of the generator's to the best of the other two (on the median,
and on the best round: on a loaded machine the best round is the nearest to
an uncontended figure).  A default run takes about 5 minutes on 2 cores.  A benchmark: it prints,
never asserts on time; exit 1 only when a path failed.  The load average
(1 min) is printed at the start, per round and at the end: on a shared 2-core
machine other people's runs inflate every figure.  vLLM's and the workers'
output goes to a log file (its path is printed first).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PATHS = ("generator", "extract", "hf")
WARMUP_PROMPTS = 4
VOCAB = 512
GEN_MOD = "speculators.data_generation.vllm_hidden_states_generator"
ENV_BEFORE_ENGINES = dict(os.environ)  # main() takes it again once its own settings (--bind) are in


# -- pieces every process uses ---------------------------------------------------------


def capture_layers(depth: int) -> list[int]:
    return sorted({min(2, depth - 1), depth // 2, depth - 1})


def make_prompts(n: int, tokens: int, seed: int = 0) -> list[list[int]]:
    import random

    rng = random.Random(seed)
    return [[rng.randrange(4, VOCAB) for _ in range(tokens)] for _ in range(n)]


def worker_threads(worker=None) -> dict:
    """Thread settings of the process it runs in (sent to vLLM workers through collective_rpc)."""
    import torch

    tasks = {}
    try:
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/status") as handle:
                for line in handle:
                    if line.startswith("Cpus_allowed_list:"):
                        cpus = line.split(":", 1)[1].strip()
                        tasks[cpus] = tasks.get(cpus, 0) + 1
    except OSError:
        pass
    return {"pid": os.getpid(), "torch_threads": torch.get_num_threads(),
            "affinity": sorted(os.sched_getaffinity(0)),
            "os_threads_by_cpus": " ".join(f"{cpus}:{n}" for cpus, n in sorted(tasks.items())),
            **{k: os.environ[k] for k in ("OMP_NUM_THREADS", "OMP_PLACES", "OMP_PROC_BIND",
                                          "KMP_AFFINITY", "GOMP_CPU_AFFINITY") if k in os.environ}}


def describe(info: dict) -> str:
    extra = " ".join(f"{k}={v}" for k, v in info.items() if k not in ("pid", "torch_threads", "affinity", "role"))
    cpus = info.get("affinity")
    return (f"{info.get('role', 'process')} pid {info['pid']}: torch threads {info['torch_threads']}, "
            f"main thread cpus {','.join(map(str, cpus)) if cpus else '?'}" + (f", {extra}" if extra else ""))


def rel_diffs(states, reference) -> list[float]:
    out = []
    for got, ref in zip(states, reference):
        got, ref = got.float(), ref.float()
        if got.shape != ref.shape:
            out.append(float("inf"))
            continue
        out.append(float((got - ref).abs().max() / ref.abs().mean().clamp_min(1e-12)))
    return out


# -- the extract child: one LLM for the whole run ---------------------------------------


def extract_child(spec_path: str, fd_in: int, fd_out: int) -> int:
    import fcntl

    from compat.confirm.extract import CONNECTOR, CPU_CONNECTOR, aux_ids

    spec = json.loads(Path(spec_path).read_text())
    commands = os.fdopen(fd_in, "r")
    replies = os.fdopen(fd_out, "w", buffering=1)

    def reply(doc):
        replies.write(json.dumps(doc) + "\n")

    states_dir = Path(spec["out_dir"]) / "states"
    started = time.monotonic()
    from vllm import LLM, SamplingParams
    from vllm.platforms import current_platform

    cpu = current_platform.is_cpu()
    transfer = {"kv_connector": CPU_CONNECTOR if cpu else CONNECTOR, "kv_role": "kv_producer",
                "kv_connector_extra_config": {"shared_storage_path": str(states_dir)}}
    if cpu:
        transfer["kv_connector_module_path"] = "compat.confirm.extract"
    ids = aux_ids(spec["layers"])
    llm = LLM(model=spec["model"], dtype="float32", max_model_len=spec["max_model_len"],
              enable_prefix_caching=False, enforce_eager=True, max_num_seqs=spec["max_num_seqs"],
              max_num_batched_tokens=spec["max_num_batched_tokens"],
              speculative_config={"method": "extract_hidden_states", "num_speculative_tokens": 1,
                                  "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": ids}}},
              kv_transfer_config=transfer)
    engine_start_s = time.monotonic() - started
    try:
        workers = llm.collective_rpc(worker_threads)
    except Exception as exc:  # noqa: BLE001 - callables need VLLM_ALLOW_INSECURE_SERIALIZATION=1
        workers = [{"error": f"{type(exc).__name__}: {exc}"}]
    sched = llm.llm_engine.vllm_config.scheduler_config
    reply({"ready": True, "engine_start_s": engine_start_s, "workers": workers, "front": worker_threads(),
           "cpu_shim": cpu, "scheduler": {"max_num_seqs": sched.max_num_seqs,
                                          "max_num_batched_tokens": sched.max_num_batched_tokens}})
    params = SamplingParams(max_tokens=1, temperature=0.0)
    prompts = spec["prompts"]
    position = {j: i for i, j in enumerate(ids)}
    for line in commands:
        cmd = json.loads(line)
        if cmd["op"] == "quit":
            break
        batch = prompts[:cmd["n"]]
        t0 = time.monotonic()
        outputs = llm.generate([{"prompt_token_ids": p} for p in batch], params, use_tqdm=False)
        files = []
        for output in outputs:
            path = (output.kv_transfer_params or {}).get("hidden_states_path")
            if not path:
                raise RuntimeError("vLLM wrote no hidden states for a prompt")
            with open(path + ".lock") as lock:  # the writer holds LOCK_EX until the file is complete
                fcntl.flock(lock, fcntl.LOCK_SH)
            files.append(path)
        seconds = time.monotonic() - t0
        from safetensors.torch import load_file, save_file

        t1 = time.monotonic()
        loaded = [load_file(path) for path in files]
        load_s = time.monotonic() - t1
        doc = {"seconds": seconds, "load_s": load_s, "tokens": sum(len(p) for p in batch)}
        if cmd.get("keep_first"):
            first = loaded[0]
            if first["token_ids"].tolist() != list(batch[0]):
                doc["problem"] = "token_ids of the first file are not the first prompt's"
            states = first["hidden_states"]
            keep = {f"layer{k}": states[:, position[k + 1], :].float().contiguous() for k in spec["layers"]}
            save_file(keep, cmd["keep_first"])
        for path in files:
            for name in (path, path + ".lock"):
                try:
                    os.remove(name)
                except OSError:
                    pass
        del loaded
        reply(doc)
    del llm
    return 0


# -- the three paths, as seen from the main process -------------------------------------


class GeneratorPath:
    name = "generator"

    def __init__(self, model, layers, max_model_len):
        import importlib

        module = importlib.import_module(GEN_MOD)
        t0 = time.monotonic()
        self.gen = module.VllmHiddenStatesGenerator(model, layer_ids=list(layers), max_model_len=max_model_len,
                                                     tensor_parallel_size=1, dtype="float32")
        self.start_s = time.monotonic() - t0
        sched = self.gen.vllm_config.scheduler_config
        self.scheduler = {"max_num_seqs": sched.max_num_seqs,
                          "max_num_batched_tokens": sched.max_num_batched_tokens}
        self.threads = [{"role": "worker", **w} for w in self.gen.executor.collective_rpc(worker_threads)]
        self.threads.append({"role": "driver (this process)", **worker_threads()})
        self.rpc_s = {}
        executor, rpc = self.gen.executor, self.gen.executor.collective_rpc

        def timed_rpc(method, *a, **kw):  # where a round's time goes: the states' trip back is one RPC
            t0 = time.monotonic()
            try:
                return rpc(method, *a, **kw)
            finally:
                key = method if isinstance(method, str) else "callable"
                self.rpc_s[key] = self.rpc_s.get(key, 0.0) + time.monotonic() - t0

        executor.collective_rpc = timed_rpc

    def run(self, prompts, keep_first=False):
        self.rpc_s = {}
        t0 = time.monotonic()
        results = self.gen.generate(prompts)
        seconds = time.monotonic() - t0
        first = [h.float() for h in results[0]["hidden_states"]] if keep_first else None
        return {"seconds": seconds, "get_states_s": self.rpc_s.get("_get_captured_states", 0.0)}, first

    def close(self):
        from compat.confirm.supervise import bounded_shutdown

        executor = getattr(self.gen, "executor", None)
        if executor is not None:
            bounded_shutdown(executor)
            del self.gen.executor  # its __del__ would shut it down again at exit


class ExtractPath:
    name = "extract"

    def __init__(self, model, layers, max_model_len, prompts, scheduler, work_dir: Path, log_file, bind):
        self.work_dir, self.layers = work_dir, list(layers)
        work_dir.mkdir(parents=True, exist_ok=True)
        spec = {"model": model, "layers": self.layers, "max_model_len": max_model_len, "prompts": prompts,
                "out_dir": str(work_dir), **scheduler}
        spec_path = work_dir / "spec.json"
        spec_path.write_text(json.dumps(spec))
        cmd_r, cmd_w = os.pipe()
        rep_r, rep_w = os.pipe()
        # the environment as it was before the generator started: the kit's patched generator sets defaults in
        # this process's environment (p05's start method, p36's VLLM_CPU_NUM_OF_RESERVED_CPU=0), which must not
        # leak into vLLM's own engine: it runs with vLLM's defaults
        env = {**ENV_BEFORE_ENGINES, "VLLM_ALLOW_INSECURE_SERIALIZATION": "1",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        if bind:
            env["VLLM_CPU_OMP_THREADS_BIND"] = bind
        t0 = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--extract-child",
                                      str(spec_path), str(cmd_r), str(rep_w)], env=env, pass_fds=(cmd_r, rep_w),
                                     stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        os.close(cmd_r)
        os.close(rep_w)
        self.commands = os.fdopen(cmd_w, "w", buffering=1)
        self.replies = os.fdopen(rep_r, "r")
        ready = self._read()
        self.start_s = time.monotonic() - t0  # child start + imports + LLM()
        self.engine_start_s = ready["engine_start_s"]  # LLM() alone, inside the child
        self.scheduler = ready["scheduler"]
        self.cpu_shim = ready["cpu_shim"]
        self.threads = [{"role": "worker", **w} if "pid" in w else w for w in ready["workers"]]
        self.threads.append({"role": "LLM front end (child)", **ready["front"]})

    def _read(self):
        line = self.replies.readline()
        if not line:
            code = self.proc.wait(timeout=30)
            raise RuntimeError(f"the extract child ended (exit {code}); see the log")
        return json.loads(line)

    def run(self, prompts, keep_first=False):
        keep = str(self.work_dir / "first.safetensors") if keep_first else None
        self.commands.write(json.dumps({"op": "round", "n": len(prompts), "keep_first": keep}) + "\n")
        doc = self._read()
        if doc.get("problem"):
            raise RuntimeError(doc["problem"])
        first = None
        if keep:
            from safetensors.torch import load_file

            data = load_file(keep)
            first = [data[f"layer{k}"] for k in self.layers]
        return doc, first

    def close(self):
        try:
            self.commands.write(json.dumps({"op": "quit"}) + "\n")
            self.commands.close()
            self.proc.wait(timeout=30)
        except Exception:  # noqa: BLE001
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class HFPath:
    name = "hf"

    def __init__(self, model, layers, batch, threads=None):
        import torch
        from transformers import AutoModelForCausalLM

        t0 = time.monotonic()
        self.torch = torch
        self.model = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
        self.start_s = time.monotonic() - t0
        self.layers, self.batch = list(layers), batch
        # vLLM's MultiprocExecutor sets its driver's (this process's) torch threads to 1 for serving
        # (set_torch_threads_for_runtime); HF gets its own count for its rounds and puts vLLM's back after.
        self.num_threads = threads or len(os.sched_getaffinity(0))
        self.outer = torch.get_num_threads()
        torch.set_num_threads(self.num_threads)
        self.threads = [{"role": f"this process (outside HF rounds: {self.outer})", **worker_threads()}]
        torch.set_num_threads(self.outer)

    def run(self, prompts, keep_first=False):
        torch = self.torch
        self.outer = torch.get_num_threads()
        torch.set_num_threads(self.num_threads)
        try:
            return self._run(prompts, keep_first)
        finally:
            torch.set_num_threads(self.outer)

    def _run(self, prompts, keep_first):
        torch = self.torch
        t0 = time.monotonic()
        results = []
        with torch.no_grad():
            for i in range(0, len(prompts), self.batch):
                chunk = prompts[i:i + self.batch]
                # equal lengths: no padding, no mask; the base model (no logits) like vLLM's prefill
                hs = self.model.model(input_ids=torch.tensor(chunk), output_hidden_states=True).hidden_states
                for j in range(len(chunk)):
                    results.append([hs[k + 1][j].clone() for k in self.layers])
        seconds = time.monotonic() - t0
        return {"seconds": seconds}, (results[0] if keep_first else None)

    def close(self):
        pass


# -- the run -------------------------------------------------------------------------------


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds per path (default 7)")
    parser.add_argument("--prompts", type=int, default=64, help="prompts per round (default 64)")
    parser.add_argument("--tokens", type=int, default=256, help="tokens per prompt (default 256)")
    parser.add_argument("--hidden", type=int, default=512, help="model hidden size, a multiple of 64 (default 512)")
    parser.add_argument("--layers", type=int, default=8, help="decoder layers (default 8)")
    parser.add_argument("--hf-batch", type=int, default=8, help="prompts per HF forward (default 8)")
    parser.add_argument("--hf-threads", type=int, default=None,
                        help="torch threads for the HF rounds (default: every cpu this process may use)")
    parser.add_argument("--bind", default=None,
                        help="VLLM_CPU_OMP_THREADS_BIND for both vLLM paths (e.g. auto, 0-1, nobind); "
                             "default: the environment's (unset = auto)")
    parser.add_argument("--settle", type=float, default=1.5,
                        help="seconds of idle before each timed round (vLLM workers busy-poll for 1 s)")
    parser.add_argument("--paths", default=",".join(PATHS), help="which paths to time (default all three)")
    parser.add_argument("--log", default=None, help="vLLM's log (default $SPECDEC_COMPAT_CACHE/logs/bench-*.log)")
    parser.add_argument("--extract-child", nargs=3, metavar=("SPEC", "FD_IN", "FD_OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.extract_child:
        return args
    for name in ("rounds", "prompts", "tokens", "layers", "hf_batch"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.hidden < 64 or args.hidden % 64:
        parser.error("--hidden must be a positive multiple of 64 (head_dim 64)")
    if args.hidden // 64 < 2:
        parser.error("--hidden must be >= 128 (kv heads = heads / 2)")
    args.paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    if not args.paths or any(p not in PATHS for p in args.paths):
        parser.error(f"--paths takes a comma list of {', '.join(PATHS)}")
    return args


def build_model(hidden: int, layers: int) -> str:
    import transformers

    from compat.layout import cache_root
    from fixtures.tiny_model import build_tiny_llama

    heads = hidden // 64
    path = cache_root() / "models" / f"bench-llama-h{hidden}-l{layers}-tf{transformers.__version__}"
    return build_tiny_llama(path, num_layers=layers, hidden_size=hidden, heads=heads, kv_heads=heads // 2,
                            head_dim=64, vocab=VOCAB, seed=0)


def load1() -> float:
    return os.getloadavg()[0]


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.extract_child:
        spec, fd_in, fd_out = args.extract_child
        return extract_child(spec, int(fd_in), int(fd_out))

    import shutil
    import tempfile

    from compat.confirm.supervise import EngineLog, kill_engine_processes
    from compat.layout import cache_root

    started = time.monotonic()
    log_path = Path(args.log) if args.log else cache_root() / "logs" / f"bench-{time.strftime('%Y%m%d-%H%M%S')}.log"
    if args.bind:
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = args.bind
    bind = os.environ.get("VLLM_CPU_OMP_THREADS_BIND")
    ENV_BEFORE_ENGINES.clear()
    ENV_BEFORE_ENGINES.update(os.environ)
    layers = capture_layers(args.layers)
    prompts = make_prompts(args.prompts, args.tokens)
    tokens = args.prompts * args.tokens
    max_model_len = args.tokens + 16
    print(f"extract_throughput: log {log_path}", flush=True)
    print(f"load average {load1():.2f} (1 min), {os.cpu_count()} cpus; VLLM_CPU_OMP_THREADS_BIND="
          f"{bind if bind is not None else 'unset (auto)'}, VLLM_CPU_KVCACHE_SPACE="
          f"{os.environ.get('VLLM_CPU_KVCACHE_SPACE', 'unset')}, OMP_NUM_THREADS="
          f"{os.environ.get('OMP_NUM_THREADS', 'unset')}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="bench-extract-", dir=cache_root()))
    paths = {}
    failed = False
    log = EngineLog(log_path)
    with log:
        say = lambda text: print(text, file=log.console, flush=True)  # noqa: E731
        try:
            t0 = time.monotonic()
            model = build_model(args.hidden, args.layers)
            say(f"model {model} (hidden {args.hidden}, {args.layers} layers, heads {args.hidden // 64}, "
                f"kv heads {args.hidden // 128}, float32; ready in {time.monotonic() - t0:.1f} s); capture layers "
                f"{layers}; {args.prompts} prompts x {args.tokens} tokens = {tokens} tokens per round; "
                f"{args.rounds} rounds")
            scheduler = None
            if "generator" in args.paths:
                say("starting the generator's engine ...")
                paths["generator"] = GeneratorPath(model, layers, max_model_len)
                scheduler = paths["generator"].scheduler
            if scheduler is None:
                scheduler = {"max_num_seqs": 32, "max_num_batched_tokens": max(8192, max_model_len)}
            if "extract" in args.paths:
                say("starting the extract_hidden_states engine (child process) ...")
                with open(log_path, "ab", buffering=0) as child_log:
                    paths["extract"] = ExtractPath(model, layers, max_model_len, prompts, scheduler, work / "extract",
                                                   child_log, args.bind)
            if "hf" in args.paths:
                paths["hf"] = HFPath(model, layers, args.hf_batch, args.hf_threads)
            order = [p for p in PATHS if p in paths]

            say("engine start (excluded from the rounds):")
            for name in order:
                path = paths[name]
                if name == "extract":
                    say(f"  extract   {path.start_s:6.1f} s (child start + imports + LLM(); LLM() alone "
                        f"{path.engine_start_s:.1f} s){' CPU shim connector' if path.cpu_shim else ''}")
                elif name == "generator":
                    say(f"  generator {path.start_s:6.1f} s (VllmHiddenStatesGenerator(); vLLM imported before)")
                else:
                    say(f"  hf        {path.start_s:6.1f} s (from_pretrained)")
            say("scheduler: " + "; ".join(f"{n} {paths[n].scheduler}" for n in order if n != "hf")
                + (f"; hf batch {args.hf_batch} prompts" if "hf" in paths else ""))
            say("threads:")
            for name in order:
                for info in paths[name].threads:
                    say(f"  {name:9} " + (describe(info) if "pid" in info else f"? {info}"))

            # warm-up, untimed: the first prompts once per path; the first prompt compared across paths
            firsts = {}
            for name in order:
                _, firsts[name] = paths[name].run(prompts[:WARMUP_PROMPTS], keep_first=True)
            ref_name = "hf" if "hf" in firsts else order[0]
            for name in order:
                if name != ref_name:
                    got = list(firsts[name])
                    if ref_name == "hf" and layers[-1] == args.layers - 1:
                        import torch  # HF's last hidden_states entry has the final norm applied; vLLM's is pre-norm

                        with torch.no_grad():
                            got[-1] = paths["hf"].model.model.norm(got[-1])
                    diffs = rel_diffs(got, firsts[ref_name])
                    say(f"check (warm-up, prompt 0): {name} vs {ref_name}, max|diff|/mean|ref| per layer "
                        + ", ".join(f"{k}: {d:.1e}" for k, d in zip(layers, diffs)))

            rates = {name: [] for name in order}
            for r in range(1, args.rounds + 1):
                cells = []
                for name in order:
                    time.sleep(args.settle)
                    doc, _ = paths[name].run(prompts)
                    rate = tokens / doc["seconds"]
                    rates[name].append(rate)
                    cell = f"{name} {rate:7.0f} tok/s ({doc['seconds']:5.1f} s)"
                    if name == "extract":
                        cell += f" [+{doc['load_s']:.2f} s reading the files back, not counted]"
                    elif name == "generator":
                        cell += f" [{doc['get_states_s']:.2f} s of it _get_captured_states]"
                    cells.append(cell)
                say(f"round {r}/{args.rounds} (load {load1():.2f}): " + " | ".join(cells))

            say(f"median over {args.rounds} rounds ({tokens} tokens each):")
            medians = {name: statistics.median(values) for name, values in rates.items()}
            for name in order:
                say(f"  {name:9} {medians[name]:7.0f} tok/s   rounds: "
                    + ", ".join(f"{v:.0f}" for v in rates[name]))
            bests = {name: max(values) for name, values in rates.items()}
            for label, figures in (("median", medians), ("best round", bests)):
                others = {n: m for n, m in figures.items() if n != "generator"}
                if "generator" in figures and others:
                    best = max(others, key=others.get)
                    say(f"ratio ({label}) generator / best other ({best}) = {figures['generator']:.0f} / "
                        f"{others[best]:.0f} = {figures['generator'] / others[best]:.2f}x   (goal >= 0.95x; "
                        + ", ".join(f"vs {n} {figures['generator'] / v:.2f}x" for n, v in others.items()) + ")")
            say(f"load average at the end {load1():.2f}; total {time.monotonic() - started:.0f} s")
        except BaseException as exc:  # noqa: BLE001 - a benchmark reports and cleans up
            failed = True
            import traceback

            say(f"FAILED: {type(exc).__name__}: {exc} (vLLM's log: {log_path})")
            say("".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-3000:])
        finally:
            for path in paths.values():
                try:
                    path.close()
                except Exception:  # noqa: BLE001
                    pass
            paths.clear()
            kill_engine_processes()
            shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
