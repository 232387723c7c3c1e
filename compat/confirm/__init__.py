"""``compat confirm --model PATH``: prove the installed generator on real vLLM.

Runs speculators' ``VllmHiddenStatesGenerator`` as installed (patched or not) on a local model and compares every
captured layer with a reference (Hugging Face float32, vLLM's own extract_hidden_states, or none: invariants
only), plus invariants that need no reference.  The rooms:

``compare``    pure numerics: per-layer statistics, invariants (no vLLM; unit-tested on plain tensors)
``tolerance``  the per-layer bound, from the reference, the dtype and the engine's device
``reference``  the references behind one interface (``BUILDERS``); ``extract`` is vllm-extract's child process
``supervise``  vLLM's log, the worker watch, bounded shutdown, the root cause of a failure
``drive``      one generator run through every call, the scheduler observed
``memory``     host memory of the engines on a CPU build of vLLM
``report``     the report: its tie to the installed files, its table, and ``--check``
``cli``        the command line (``compat confirm``, ``python -m compat.confirm``)

The one entry for programs and tests is ``run(RunSpec(...)) -> report document``; the names below are the
public API; each room's public names are public too (``compat.confirm.compare.compare``, ...).
"""

from compat.checkpoint import num_layers
from compat.confirm.cli import CALLS, DESCRIPTION, add_arguments, main, make_calls
from compat.confirm.compare import Reference
from compat.confirm.reference import hf_reference
from compat.confirm.runner import GEN_MOD, RunSpec, SpecError, run
from compat.confirm.tolerance import RTOL, TOLERANCE_RULE, choose

__all__ = ["CALLS", "DESCRIPTION", "GEN_MOD", "RTOL", "TOLERANCE_RULE", "Reference", "RunSpec", "SpecError",
           "add_arguments", "choose", "hf_reference", "main", "make_calls", "num_layers", "run"]
