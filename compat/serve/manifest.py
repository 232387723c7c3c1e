"""The manifest written beside serve-path hidden states, and a converter between layer-id conventions.

One id number means different tensors across the ecosystem, so a draft
trained later must know what its inputs were.  Conventions (research note
§0.12, §5):

- ``vllm-entering``: vLLM's extract_hidden_states, speculators >= 0.5, the EAGLE
  reference: id k < L is the residual entering layer k (HF ``hidden_states[k]``),
  id L the final pre-norm state.
- ``output-of-layer``: SGLang's explicit ids and speculators 0.3/0.4's generator:
  id k is the output of layer k (HF ``hidden_states[k+1]``); k = L-1 is the final
  pre-norm state.
- ``modelopt-hf``: ModelOpt's HF dumper indexes HF ``hidden_states[k+1]`` as is, so
  k = L-1 is HF's last entry, the post-norm state.
- ``torchspec-vllm``: TorchSpec shifts its post-layer ids +1 for vLLM (so they are
  ``vllm-entering`` ids) but appends ``L-1`` as "final": HF ``hidden_states[L-1]``.

A tensor is ``("hf", k)`` for HF ``hidden_states[k]`` (0 <= k < L),
``("final", "pre-norm")`` or ``("final", "post-norm")``.  Pure: no torch, no vLLM.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

CONVENTIONS = ("vllm-entering", "output-of-layer", "modelopt-hf", "torchspec-vllm")
FILENAME = "hidden_states_manifest.json"
PRE_NORM, POST_NORM = ("final", "pre-norm"), ("final", "post-norm")


class ManifestError(ValueError):
    """Bad input: an unknown convention, an id out of range, a manifest that does not parse."""


def _check(convention: str, layer_id: int, num_layers: int) -> None:
    if convention not in CONVENTIONS:
        raise ManifestError(f"unknown layer-id convention {convention!r} (known: {', '.join(CONVENTIONS)})")
    if not isinstance(num_layers, int) or num_layers < 1:
        raise ManifestError(f"num_layers must be a positive int, got {num_layers!r}")
    top = num_layers if convention == "vllm-entering" else num_layers - 1
    if not isinstance(layer_id, int) or isinstance(layer_id, bool) or not 0 <= layer_id <= top:
        raise ManifestError(f"layer id {layer_id!r} is outside 0..{top} for {convention} with {num_layers} layers")


def tensor_of(convention: str, layer_id: int, num_layers: int) -> tuple:
    """The tensor ``layer_id`` names under ``convention`` in a model of ``num_layers`` decoder layers."""
    _check(convention, layer_id, num_layers)
    if convention in ("vllm-entering", "torchspec-vllm"):
        return PRE_NORM if layer_id == num_layers else ("hf", layer_id)
    if layer_id == num_layers - 1:
        return PRE_NORM if convention == "output-of-layer" else POST_NORM
    return ("hf", layer_id + 1)


def id_of(convention: str, tensor: tuple, num_layers: int) -> int:
    """The id ``convention`` uses for ``tensor``; ManifestError when it has none."""
    for layer_id in range(num_layers + 1):
        try:
            if tensor_of(convention, layer_id, num_layers) == tuple(tensor):
                return layer_id
        except ManifestError:
            continue
    raise ManifestError(f"{convention} has no id for {tensor} (e.g. HF hidden_states[0], the embeddings, is not an "
                        "output of any layer; vLLM never captures the post-norm state)")


def convert_ids(ids, source: str, target: str, num_layers: int) -> list[int]:
    """``ids`` of ``source`` as the ids of ``target`` that name the same tensors (order kept)."""
    return [id_of(target, tensor_of(source, i, num_layers), num_layers) for i in ids]


@dataclass(frozen=True)
class Manifest:
    """What one directory of serve-path hidden states means (written beside the safetensors files)."""

    vllm: str
    speculators: str
    connector: str  # e.g. ExampleHiddenStatesConnector or hs_connectors.fp8_hidden_states_connector
    connector_version: str | None  # hs-connectors release, None for vLLM's built-in connector
    num_layers: int
    ids: list[int]  # as configured (eagle_aux_hidden_state_layer_ids)
    final_id: int | None  # the id speculators' trainer reads as the verifier's last state, if any
    dtype: str  # file dtype, e.g. bfloat16 or float8_e4m3fn
    tensor_parallel: int = 1
    convention: str = "vllm-entering"
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if not self.ids:
            raise ManifestError("ids is empty: extract_hidden_states needs at least one layer id")
        for i in self.ids:
            _check(self.convention, i, self.num_layers)
        if len(set(self.ids)) != len(self.ids):  # vLLM 0.17-0.33: the engine dies on them, no file holds them
            raise ManifestError(f"ids {self.ids} repeat an id: vLLM writes no file for them (the extract buffer has "
                                "len(ids) rows, the capture one per layer); unique ids only")
        if self.final_id is not None and self.final_id not in self.ids:
            raise ManifestError(f"final_id {self.final_id} is not one of the ids {self.ids}")
        if not isinstance(self.tensor_parallel, int) or self.tensor_parallel < 1:
            raise ManifestError(f"tensor_parallel must be a positive int, got {self.tensor_parallel!r}")

    @property
    def rows(self) -> list[int]:
        """The ids in file row order: ascending (capture is a membership test in the layer loop)."""
        return sorted(self.ids)

    def row(self, layer_id: int) -> int:
        """The row of ``hidden_states[T, N, H]`` that holds ``layer_id``."""
        if layer_id not in self.rows:
            raise ManifestError(f"layer id {layer_id} was not captured (rows: {self.rows})")
        return self.rows.index(layer_id)

    @property
    def final_is_last_row(self) -> bool:
        """speculators' trainer takes ``hidden_states[:, -1]`` as the last state: right only if final is the largest id."""
        return self.final_id is not None and self.final_id == self.rows[-1]

    def as_json(self) -> dict:
        doc = asdict(self)
        doc["rows"] = self.rows
        doc["tensors"] = [list(tensor_of(self.convention, i, self.num_layers)) for i in self.rows]
        return doc

    def write(self, folder: str | Path) -> Path:
        path = Path(folder) / FILENAME
        path.write_text(json.dumps(self.as_json(), indent=2, sort_keys=True) + "\n")
        return path

    @classmethod
    def read(cls, folder: str | Path) -> "Manifest":
        path = Path(folder) / FILENAME
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ManifestError(f"cannot read {path}: {exc}") from exc
        known = {f for f in cls.__dataclass_fields__}
        try:
            return cls(**{k: v for k, v in doc.items() if k in known})
        except TypeError as exc:
            raise ManifestError(f"{path}: {exc}") from exc

    def in_convention(self, target: str) -> list[int]:
        """The rows' ids as ``target`` would write them (e.g. a draft config of another trainer)."""
        return convert_ids(self.rows, self.convention, target, self.num_layers)
