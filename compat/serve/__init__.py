"""The modern path (speculators >= 0.5: a real ``vllm serve`` with ``extract_hidden_states``, driven by speculators'
client): its plan rules, probes, proofs, manifest and runtime, all in this package.

speculators >= 0.5 generates EAGLE-3 training data through a server: ``vllm
serve --speculative-config '{"method": "extract_hidden_states", ...}'`` plus
vLLM's ``ExampleHiddenStatesConnector``, and its client
(``speculators generate-offline-data``) moves one safetensors per sample.

- What to patch: :mod:`.probes` (the ``serve.*`` probes, registered in
  :data:`compat.probes.PROBES`), :mod:`.plan` (``compat plan``'s answer and its
  rules where no patch helps; the declarations are ``patches/serve/``) and
  :mod:`.proofs` (where each serve patch's leave-one-out proof lives).
- What was written: :mod:`.manifest` (the manifest beside the hidden states,
  and the layer-id conventions).
- Whether it is right (``compat confirm --path serve``): :func:`run` starts
  that server, drives it with that client, and checks every file: rows
  against Hugging Face (id ``k`` = ``hidden_states[k]``, the residual entering
  layer ``k``; id ``L`` = the final pre-norm state) or, with no HF at all
  (``--reference self``, docs/serve-self-reference.md), the logits rebuilt
  from the final row against the same server's ``prompt_logprobs``, each file
  against its prompt served alone, and the layers between ids recomputed from
  the checkpoint's weights.  Modules: :mod:`.spec` (what to run),
  :mod:`.options` (confirm's command line), :mod:`.server`, :mod:`.client`,
  :mod:`.reference`, :mod:`.twin`, :mod:`.recompute`, :mod:`.checks`,
  :mod:`.files` (manifest, ``--files``), :mod:`.runner` (``run``).

The old path (speculators 0.3/0.4's generator) keeps the same parts one level up:
:mod:`compat.plan`, :mod:`compat.probes` (which also holds the probe machinery,
:mod:`compat.probes.base`), ``patches/`` and :mod:`compat.confirm`.  What both
paths share stays there too: the registry, the surface, the patcher and
:mod:`compat.proven` (which needed patches a record proves, on either path).
"""

from __future__ import annotations

__all__ = ["ServeSpec", "run"]


def __getattr__(name: str):
    # On first use only: importing the package (for its probes or plan) does not load the runtime.
    if name == "run":
        from .runner import run

        return run
    if name == "ServeSpec":
        from .spec import ServeSpec

        return ServeSpec
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
