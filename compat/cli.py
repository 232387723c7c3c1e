"""The ``compat`` console script: ``compat apply|surface|plan|confirm|catalogue ...``."""

from __future__ import annotations

import importlib
import sys

COMMANDS = ("apply", "surface", "plan", "confirm", "catalogue")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: compat {{{'|'.join(COMMANDS)}}} [options]", file=sys.stderr)
        return 2
    module = importlib.import_module(f"compat.{argv[0]}")
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
