"""Named probes of the vLLM and speculators API surface.

A probe is a small function ``Reader -> Reading | Unknown``: it reads source
with ``ast`` (never imports vLLM), returns a small comparable value, and keeps
where it read it apart from the value.  ``PROBES`` maps probe name to function;
:mod:`compat.probes.vllm`, :mod:`compat.probes.runner_v2` (which also reads
``VLLM_USE_V2_MODEL_RUNNER`` from the reader's environment, when known),
:mod:`compat.probes.speculators` and :mod:`compat.probes.transformers` define them; the
probes of the modern path (``vllm serve`` + a KV connector) live with the rest of that path, in
:mod:`compat.serve.probes`, and are registered here too.
"""

from __future__ import annotations

from .base import PROBES, Reading, Unknown, probe  # noqa: F401
from . import cpu_platform, kv_extensible, request_tokens, runner_v2, speculators, transformers  # noqa: F401,E402
from . import vllm  # noqa: F401,E402  (define the probes)
from ..serve import probes as _serve_probes  # noqa: F401,E402  (the serve path's probes)

__all__ = ["PROBES", "Reading", "Unknown", "probe"]
