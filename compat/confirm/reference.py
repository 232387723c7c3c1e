"""What ``compat confirm`` compares the generator with: one interface, one builder per ``--reference``.

A builder takes a ``ReferenceRequest`` (the checkpoint, the unique prompts, the generator layer ids, dtype,
parallelism and where vLLM's log goes) and returns ``(Reference, meta)``: the tensors per prompt and layer (see
``compat.confirm.compare.Reference``) and what the report says about how they were made.  ``BUILDERS`` maps the
``--reference`` names to builders; the serve path's references join it with a builder of the same shape.

``hf``            Hugging Face ``output_hidden_states[k + 1]`` in float32, in this process.
``vllm-extract``  vLLM's own EAGLE-3 ``extract_hidden_states`` (aux id ``k + 1``) in the generator's dtype, in a
                  child process (compat.confirm.extract), so its engine is gone before the generator's starts.
``none``          no tensors: only the invariants of compat.confirm.compare are checked.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from compat.checkpoint import num_layers
from compat.confirm.compare import Reference, RoutedReference


@dataclass(frozen=True)
class ReferenceRequest:
    model: str
    prompts: list  # unique prompts, token ids
    layers: list  # generator layer ids
    dtype: str = "float32"  # the generator's; the HF reference is float32 whatever it is
    tp: int = 1
    pp: int = 1
    trust_remote_code: bool = False
    max_model_len: int = 512
    log_path: Path | None = None  # vLLM's log (the vllm-extract child appends to it)
    engine_args: dict = field(default_factory=dict)  # vllm.LLM keyword arguments that follow the generator's


def hf_reference(model_path: str, prompts, layers, dtype: str = "float32",
                 trust_remote_code: bool = False) -> Reference:
    """HF hidden states per prompt for ``layers`` (generator ids), with the model (its final norm) and depth."""
    import torch
    from transformers import AutoModelForCausalLM

    from compat.shared.routing import MarginRecorder

    model = AutoModelForCausalLM.from_pretrained(model_path, torch_dtype=getattr(torch, dtype),
                                                 trust_remote_code=trust_remote_code).eval()
    refs, routing = {}, {}
    recorder = MarginRecorder(model)  # MoE checkpoints: how near each token's routing is to a tie
    try:
        with torch.no_grad():
            for prompt in prompts:
                if tuple(prompt) not in refs:
                    hs = model(torch.tensor([prompt]), output_hidden_states=True).hidden_states
                    refs[tuple(prompt)] = [hs[k + 1][0].float() for k in layers]
                    if recorder.active:
                        routing[tuple(prompt)] = recorder.take()
    finally:
        recorder.remove()
    return RoutedReference(model, refs, model.config.num_hidden_layers, routing or None)


def hf(request: ReferenceRequest) -> tuple[Reference, dict]:
    reference = hf_reference(request.model, request.prompts, request.layers,
                             trust_remote_code=request.trust_remote_code)
    return reference, {"what": "HF output_hidden_states[k+1], float32"}


def vllm_extract(request: ReferenceRequest) -> tuple[Reference, dict]:
    import shutil
    import tempfile

    from compat.confirm.extract import run_reference
    from compat.layout import cache_root

    root = cache_root() / "confirm-extract"
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="run-", dir=root))
    try:
        with open(request.log_path, "ab", buffering=0) if request.log_path else nullcontext() as log:
            refs, meta = run_reference(request.model, request.prompts, request.layers, dtype=request.dtype,
                                       tp=request.tp, pp=request.pp, trust_remote_code=request.trust_remote_code,
                                       max_model_len=request.max_model_len, work_dir=work, log_file=log,
                                       engine_args=dict(request.engine_args))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return Reference(None, refs, num_layers(request.model)), {"what": "vLLM extract_hidden_states aux id k+1", **meta}


def none(request: ReferenceRequest) -> tuple[Reference, dict]:
    return Reference(None, None, num_layers(request.model)), {"what": "no reference: invariants only"}


BUILDERS = {"hf": hf, "vllm-extract": vllm_extract, "none": none}
KINDS = tuple(BUILDERS)


def build(kind: str, request: ReferenceRequest) -> tuple[Reference, dict]:
    """``(Reference, meta)`` of the ``--reference`` named ``kind``."""
    try:
        builder = BUILDERS[kind]
    except KeyError:
        raise ValueError(f"unknown reference {kind!r}; known: {', '.join(KINDS)}") from None
    return builder(request)
