"""``python -m compat.confirm --model PATH``: prove the installed generator on real vLLM.

Runs speculators' ``VllmHiddenStatesGenerator`` as installed (patched or not)
on a local model and compares every captured layer with Hugging Face
transformers' ``output_hidden_states`` in float32.

Layer-index semantics: generator layer id ``k`` is the output of decoder layer
``k`` (hidden + residual, before the final norm), which is HF
``hidden_states[k + 1]``.  HF's last entry has the final norm applied, so the
generator's last layer is passed through the model's final norm first.

Calls of 1, 11, 33 and 11 sequences on one generator cross the 11-sequence
ordering bug and the 32-sequence slot limit, repeat calls, and (33 prompts of
250-400 tokens > 8192, plus ``max_num_batched_tokens``) force chunked prefill.
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import os
import sys
import tempfile
import time
import traceback

GEN_MOD = "speculators.data_generation.vllm_hidden_states_generator"
ATOL = 2e-3
CALLS = (1, 11, 33, 11)


def make_calls(sizes=CALLS, seed: int = 0, vocab: int = 512):
    """Deterministic token-id prompts per call; a 33-call alone exceeds 8192 tokens."""
    import random

    rng = random.Random(seed)
    calls = []
    for n in sizes:
        low, high = (250, 400) if n >= 33 else (5, 300)
        calls.append([[rng.randrange(4, vocab) for _ in range(rng.randint(low, high))] for _ in range(n)])
    return calls


def hf_reference(model_path: str, prompts, layers):
    """HF float32 hidden states per prompt for ``layers`` (generator ids), plus the model and depth."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, torch_dtype=torch.float32).eval()
    refs = {}
    with torch.no_grad():
        for prompt in prompts:
            if tuple(prompt) not in refs:
                hs = model(torch.tensor([prompt]), output_hidden_states=True).hidden_states
                refs[tuple(prompt)] = [hs[k + 1][0] for k in layers]
    return model, refs, model.config.num_hidden_layers


def compare(results, prompts, reference, layers):
    """(max |diff|, problems) of generator results against the HF reference."""
    import torch

    hf_model, refs, num_layers = reference
    worst, problems = 0.0, []
    if len(results) != len(prompts):
        problems.append(f"{len(results)} results for {len(prompts)} prompts")
    for i, (result, prompt) in enumerate(zip(results, prompts)):
        if result["input_ids"].tolist() != prompt:
            problems.append(f"result {i}: input_ids are another prompt's")
        for j, k in enumerate(layers):
            got = result["hidden_states"][j].float()
            if k == num_layers - 1:  # HF's last entry has the final norm applied
                with torch.no_grad():
                    got = hf_model.model.norm(got)
            ref = refs[tuple(prompt)][j]
            if got.shape != ref.shape:
                problems.append(f"result {i} layer {k}: shape {tuple(got.shape)} != HF {tuple(ref.shape)}")
                continue
            diff = (got - ref).abs().max().item()
            worst = max(worst, diff)
            if diff > ATOL:
                problems.append(f"result {i} layer {k}: max|diff| {diff:.3e}")
    return worst, problems


class WorkerLog:
    """Capture fds 1 and 2 while a generator runs: spawned vLLM workers log their root cause there."""

    def __enter__(self):
        sys.stdout.flush()
        sys.stderr.flush()
        self.file = tempfile.TemporaryFile()
        self.saved = {fd: os.dup(fd) for fd in (1, 2)}
        for fd in self.saved:
            os.dup2(self.file.fileno(), fd)
        return self

    def __exit__(self, *exc):
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, saved in self.saved.items():
            os.dup2(saved, fd)
            os.close(saved)
        self.file.seek(0)
        self.text = self.file.read().decode("utf-8", "replace")
        self.file.close()
        sys.stderr.write(self.text[-20000:])
        return False


def error_report(exc: BaseException) -> dict:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return {"type": type(exc).__name__, "message": str(exc)[:2000], "traceback": text[-4000:]}


def run_generator(gen_module, model, calls, reference, layers, max_batched=None, after=None):
    """Construct the generator, run every call, compare with HF; never raises.

    ``after(gen)`` may observe the live engine before it is shut down.
    """
    with WorkerLog() as log:
        out = _run(gen_module, model, calls, reference, layers, max_batched, after)
    if out["error"] is not None:
        lines = [line for line in log.text.splitlines() if "rror" in line or "Exception" in line]
        out["worker_log"] = "\n".join(lines[-60:])[-8000:]
    return out


def _run(gen_module, model, calls, reference, layers, max_batched, after):
    out = {"ok": False, "stage": "init", "calls": [], "error": None}
    gen = None
    started = time.monotonic()
    try:
        cls = gen_module.VllmHiddenStatesGenerator
        kwargs = dict(layer_ids=list(layers), max_model_len=512, tensor_parallel_size=1, dtype="float32")
        if max_batched and "max_num_batched_tokens" in inspect.signature(cls.__init__).parameters:
            kwargs["max_num_batched_tokens"] = max_batched
        gen = cls(model, **kwargs)
        out["engine_start_s"] = round(time.monotonic() - started, 2)
        out["block_size"] = gen.vllm_config.cache_config.block_size
        out["stage"] = "generate"
        for prompts in calls:
            t0 = time.monotonic()
            results = gen.generate(prompts)
            worst, problems = compare(results, prompts, reference, layers)
            out["calls"].append({"n": len(prompts), "seconds": round(time.monotonic() - t0, 2),
                                 "max_abs_diff": worst, "problems": problems[:20]})
        out["ok"] = all(not c["problems"] for c in out["calls"])
        out["stage"] = "compared"
        if after is not None:
            out["runtime"] = after(gen)
    except BaseException as exc:  # noqa: BLE001 - the report carries it
        out["error"] = error_report(exc)
    finally:
        if gen is not None and getattr(gen, "executor", None) is not None:
            try:
                gen.executor.shutdown()
            except Exception:  # noqa: BLE001
                pass
        del gen
        gc.collect()
    out["seconds"] = round(time.monotonic() - started, 2)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compat.confirm", description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a local HF checkpoint (e.g. fixtures/tiny_model.py's)")
    parser.add_argument("--layers", default="0,1,3")
    parser.add_argument("--max-batched-tokens", type=int, default=96)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    layers = [int(x) for x in args.layers.split(",")]
    calls = make_calls()
    reference = hf_reference(args.model, [p for c in calls for p in c], layers)
    import importlib

    try:
        module = importlib.import_module(GEN_MOD)
    except BaseException as exc:  # noqa: BLE001
        run = {"ok": False, "stage": "import", "calls": [], "error": error_report(exc)}
    else:
        run = run_generator(module, args.model, calls, reference, layers, args.max_batched_tokens)
    if run["error"]:
        print(f"confirm: FAILED at {run['stage']}: {run['error']['type']}: {run['error']['message'][:300]}")
    else:
        print(f"confirm: engine start {run['engine_start_s']} s, block_size {run['block_size']} (from the platform)")
        print("  calls  seconds  max|diff| vs HF float32  problems")
        for call in run["calls"]:
            print(f"  {call['n']:5}  {call['seconds']:7}  {call['max_abs_diff']:.2e}{'':17}{len(call['problems'])}")
        print(f"confirm: {'OK' if run['ok'] else 'WRONG'}: hidden states of layers {layers} "
              f"{'equal' if run['ok'] else 'differ from'} HF output_hidden_states[k+1] (atol {ATOL})")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(run, handle, indent=2)
    return 0 if run["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
