"""Patch declarations of the modern path (speculators >= 0.5: ``vllm serve`` + ``extract_hidden_states``).

They edit vLLM (``target="vllm"``), not speculators' generator, so they are
kept apart from the old path's ``patches/p*.py``: ``registry.load_patches("serve")``
loads them.  Importing this package registers their probes.
"""

from . import _probes  # noqa: F401  (registers the probes the declarations use)
