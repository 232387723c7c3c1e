"""``compat confirm --model PATH`` on the old path: prove the installed generator on real vLLM.

Runs speculators' ``VllmHiddenStatesGenerator`` as installed (patched or not) on a local model and compares every
captured layer with a reference (Hugging Face float32, vLLM's own extract_hidden_states, or none: invariants
only), plus invariants that need no reference.  The rooms:

``compare``    pure numerics: per-layer statistics, invariants (no vLLM; unit-tested on plain tensors)
``reference``  the references behind one interface (``BUILDERS``); ``extract`` is vllm-extract's child process
``supervise``  the worker watch, bounded shutdown (the root cause of a failure: compat/vllm_log.py)
``drive``      one generator run through every call, the scheduler observed
``report``     the report: its tie to the installed files, its table, and ``--check``
``cli``        this path's side of the command line (compat/confirm_command.py parses it and picks the path)

What both pipelines share (the per-layer bound, routing margins, prompts, host memory, the options) lives in
compat/shared/; this package and compat/serve/ never import each other.

The one entry for programs and tests is ``run(RunSpec(...)) -> report document``; the names below are the
public API; each room's public names are public too (``compat.confirm.compare.compare``, ...).
"""

from compat.checkpoint import num_layers
from compat.confirm.cli import make_calls
from compat.confirm.compare import Reference
from compat.confirm.reference import hf_reference
from compat.confirm.runner import GEN_MOD, RunSpec, SpecError, run
from compat.shared.arguments import CALLS
from compat.shared.tolerance import RTOL, TOLERANCE_RULE, choose

__all__ = ["CALLS", "GEN_MOD", "RTOL", "TOLERANCE_RULE", "Reference", "RunSpec", "SpecError", "choose",
           "hf_reference", "make_calls", "num_layers", "run"]
