"""``python -m compat.serve --model PATH``: the serve-path confirm from a shell, with ``compat confirm``'s options
(``compat confirm --path serve``) plus ``--work-dir`` and ``--vocab``.

Exit codes as compat confirm --path serve's: 0 OK, 1 WRONG or ERROR, 2 bad arguments, 4 INCOMPLETE (a part not looked
at, named), 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys

from .options import cpu_mla, served_device, serve_calls  # noqa: F401  (re-exported: the contract tests use them)
from .spec import ServeSpec

MAX_MODEL_LEN = ServeSpec.__dataclass_fields__["max_model_len"].default


def default_calls(vocab: int, budget: int, seed: int = 0) -> list[list[list[int]]]:
    """11 prompts, then 33 (32 in flight) with one of 3x the token budget and a repeat of a first-run prompt."""
    return serve_calls(vocab=vocab, budget=budget, seed=seed)


def main(argv=None) -> int:
    from compat.cli import run_command
    from compat.confirm_command import run
    from compat.shared.arguments import add_arguments
    from compat.shared.options import ConfirmOptions

    parser = argparse.ArgumentParser(prog="python -m compat.serve", description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.add_argument("--vocab", type=int, default=512, help="prompt token ids are drawn from 4..VOCAB-1")
    parser.add_argument("--work-dir", help="server log, files and client logs (default: a new temp dir)")
    return run_command("confirm", ConfirmOptions, lambda options: run(options.replace(path="serve")),
                       parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
