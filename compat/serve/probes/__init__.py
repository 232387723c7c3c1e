"""The modern path's probes (``serve.*``): what ``vllm serve`` + a KV connector, hs-connectors and speculators'
client do, read with ``ast`` like every probe (:mod:`compat.probes.base`).

:mod:`.method` (has the release ``extract_hidden_states`` at all), :mod:`.vllm` (vLLM's serve path),
:mod:`.connector` (how a connector module reads the KV cache), :mod:`.speculators` (speculators' client),
:mod:`.layer_ids`, :mod:`.runner` (which model runner extracts), :mod:`.seams` (the connector and config seams
that moved in 0.33-0.34), :mod:`.cpu_copy`, :mod:`.cpu_sampler`, :mod:`.cpu_dispatch` and :mod:`.cpu_v2`.  Importing this
package registers them in :data:`compat.probes.PROBES`, which imports it.
"""

from __future__ import annotations

from . import connector, cpu_copy, cpu_dispatch, cpu_sampler, cpu_v2, layer_ids, method, runner, seams  # noqa: F401
from . import speculators, vllm  # noqa: F401  (define the probes)
