"""``python -m compat.confirm``: the same command line as ``compat confirm``."""

import sys

from compat.confirm.cli import main

sys.exit(main())
