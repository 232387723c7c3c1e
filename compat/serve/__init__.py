"""The modern path's runtime side: a real ``vllm serve`` with ``extract_hidden_states``, driven by speculators' client.

speculators >= 0.5 generates EAGLE-3 training data through a server: ``vllm
serve --speculative-config '{"method": "extract_hidden_states", ...}'`` plus
vLLM's ``ExampleHiddenStatesConnector``, and its client
(``speculators generate-offline-data``) moves one safetensors per sample.
:func:`run` starts that server, drives it with that client, and checks every
file: rows against Hugging Face (id ``k`` = ``hidden_states[k]``, the residual
entering layer ``k``; id ``L`` = the final pre-norm state) or, with no HF at
all (``--reference self``, docs/serve-self-reference.md), the logits rebuilt
from the final row against the same server's ``prompt_logprobs``, each file
against its prompt served alone, and the layers between ids recomputed from the
checkpoint's weights.  Modules: :mod:`.spec` (what to run), :mod:`.options`
(confirm's command line), :mod:`.server`, :mod:`.client`, :mod:`.reference`,
:mod:`.twin`, :mod:`.recompute`, :mod:`.checks`, :mod:`.files` (manifest,
``--files``), :mod:`.runner` (``run``).
"""

from .runner import run  # noqa: F401
from .spec import ServeSpec  # noqa: F401

__all__ = ["ServeSpec", "run"]
