"""Patch declarations of the modern path (speculators >= 0.5: ``vllm serve`` + ``extract_hidden_states`` + a KV
connector), one module per upstream break, loaded by ``compat.registry.load_patches("serve")``.

Edits only insert code, fenced by ``compat.serve.probes.connector.KIT_BEGIN`` / ``KIT_END``, so the serve
probes keep reading what upstream shipped after an apply.  The CPU connector patch
(``vllm.serve.cpu_connector``) is written by the modern-runtime work.
"""
