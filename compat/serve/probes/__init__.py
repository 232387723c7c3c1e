"""The modern path's probes (``serve.*``): what ``vllm serve`` + a KV connector, hs-connectors and speculators'
client do, read with ``ast`` like every probe (:mod:`compat.probes.base`).

:mod:`.method` (has the release ``extract_hidden_states`` at all), :mod:`.vllm` (vLLM's serve path),
:mod:`.connector` (how a connector module reads the KV cache), :mod:`.speculators` (speculators' client),
:mod:`.layer_ids`, :mod:`.cpu_copy`, :mod:`.cpu_sampler` and :mod:`.cpu_dispatch`.  Importing this package registers them in
:data:`compat.probes.PROBES`, which imports it.
"""

from __future__ import annotations

from . import connector, cpu_copy, cpu_dispatch, cpu_sampler, layer_ids, method, speculators, vllm  # noqa: F401  (define the probes)
