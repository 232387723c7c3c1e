"""``compat confirm --path serve --files DIR``: a user's own files checked against their model, with no server.

Apart from compat/serve/files.py (the manifest and the files, which the runner writes) because it runs the
runner's checks: the runner imports files.py, this imports both.
"""

from __future__ import annotations

from pathlib import Path

from compat.errors import UsageError
from compat.exit_policy import ENVIRONMENT, VERDICT_CODES
from compat.shared.options import ConfirmOptions

from .files import manifest_or_usage, read_folder
from .identity import describe, from_files
from .runner import ServeResult, check_files, emit
from .spec import ServeSpec


def validate(args: ConfirmOptions) -> int:
    """``compat confirm --path serve --files DIR``: 0 OK, 1 WRONG, 4 INCOMPLETE; bad input raises UsageError (nothing
    written).  The
    report's ``confirmed`` is what the model and the folder's manifest say (compat.serve.identity.from_files)."""
    folder = Path(args.files)
    if not folder.is_dir():
        raise UsageError(f"--files {folder}: not a folder")
    if args.reference not in ("self", "hf", "none"):
        raise UsageError(f"--files checks with --reference self, hf or none, not {args.reference}")
    files = read_folder(folder)
    if not files:
        raise UsageError(f"--files {folder}: no hs_<n>.safetensors there")
    depth = args.checkpoint.num_layers if args.checkpoint else None
    if depth is None:
        raise UsageError(f"--files needs --model, a readable local HF checkpoint with num_hidden_layers "
                         f"({args.checkpoint.unread if args.checkpoint else args.model})")
    manifest = manifest_or_usage(folder, args, depth)
    if isinstance(manifest, str):
        raise UsageError(manifest)
    try:
        spec = ServeSpec(model=args.model, work_dir=folder, calls=[[p or [0] for p, _ in files]],
                         layer_ids=manifest.ids, dtype=manifest.dtype, device="cpu", rtol=args.rtol,
                         logprobs_check=False, twin_check=False, hf_check=args.reference == "hf",
                         recompute_check=args.reference == "self", checkpoint=args.checkpoint)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    result = check_files(ServeResult("OK", ""), spec, files, {})
    not_run = {"logprobs": "needs the server's prompt_logprobs (run compat confirm --path serve --reference self)",
               "twin": "needs the server (each prompt served alone)"} if args.reference == "self" else {}
    doc = {**result.as_dict(), "not_run": not_run, "manifest": manifest.as_json(), "files": str(folder),
           "confirmed": from_files(args.checkpoint, manifest)}
    code = emit(result, doc, args.output, "every file passes the checks that need no server",
                [f"  {name:16} not run: {why}" for name, why in not_run.items()]
                + [f"  confirmed: {describe(doc['confirmed'])}"])
    return code if code == ENVIRONMENT else VERDICT_CODES.get(result.verdict, code)
