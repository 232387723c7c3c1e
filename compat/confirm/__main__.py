"""``python -m compat.confirm``: the same command line as ``compat confirm``."""

import sys

from compat.confirm_command import main

sys.exit(main())
