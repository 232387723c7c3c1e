"""Patch proofs as evidence: which records prove which patch (``evidence``, generating compat/proof_evidence.py)
and the one-patch leave-one-out run in a venv of your own (``leave_one_out``).  Orchestration, not a fixture."""
