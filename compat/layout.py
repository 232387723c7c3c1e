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

#: pytest markers (registered by compat.pytest_plugin; pyproject repeats none of them).
MARKERS = {
    "contract": "runs real vLLM on a tiny local model (needs a lane)",
    "proof": "leave-one-out proof of every needed patch (one engine start each)",
    "mla": "tiny Kimi-K2.5/DeepSeek-V3 (MLA + MoE) through the generator (minutes; not in -m contract)",
    "parallel": "the generator at TP=2 / PP=2 on CPU (minutes; not in -m contract)",
    "extract": "compat confirm --reference vllm-extract/none runs (extra engine starts; deselect with -m 'not extract')",
    "serve": "the modern path: a real `vllm serve` + speculators >= 0.5's client (not in -m contract; run with -m serve "
             "in a serve lane: python3 fixtures/lanes.py test --no-unit serve)",
    "user_install": "a user's own venv built as the README says, the serve path proven there (minutes; .ci/run runs "
                    "it: python -m pytest -m user_install tests/user)",
}


def cache_root() -> Path:
    """``$SPECDEC_COMPAT_CACHE``, default ``~/.cache/specdec-compat`` (lanes, wheels, models, probe cache)."""
    root = os.environ.get("SPECDEC_COMPAT_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "specdec-compat"
