"""Names shared by the whole kit, each written once: where caches live, which speculators files matter.

A path or directory name that appears in more than one module belongs here,
so that a move upstream (or a change of cache root) is one edit.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The generator and worker extension of speculators 0.3.0 / 0.4.x (the files the patches edit).
GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"
WORKER = "speculators/data_generation/custom_worker.py"
SPECULATORS_CONFIG = "speculators/config.py"

#: Patcher state beside a distribution: ``<site-packages>/.specdec-compat/<dist>-<version>/``.
STATE_DIR = ".specdec-compat"

def cache_root() -> Path:
    """``$SPECDEC_COMPAT_CACHE``, default ``~/.cache/specdec-compat`` (lanes, wheels, models, probe cache)."""
    root = os.environ.get("SPECDEC_COMPAT_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "specdec-compat"
