from compat.declaration import Patch, insert_before

from ._fence import fenced

ID = "speculators.serve.client_lock_wait"
CLIENT = "speculators/data_generation/vllm_client.py"

PATCH = Patch(
    id=ID,
    title="speculators 0.5.0 client: wait for vLLM's .lock before handing the hidden-states file on",
    why=(
        "speculators 0.5.0 returns hidden_states_path as soon as the completion arrives and the script moves "
        "the file at once. vLLM >= 0.22 writes it asynchronously under an exclusive flock on <file>.lock, so "
        "the client moves a partial or missing file ('No such file or directory'; speculators#424, #566). The "
        "lock wait arrived in speculators 0.6.0."
    ),
    how="In extract_output, when <path>.lock exists, take a shared flock on it (blocks until vLLM's writer "
        "releases its exclusive one), as vLLM's own load_hidden_states does. The async client calls extract_output "
        "through asyncio.to_thread, so a wait blocks one worker thread, not the event loop that carries the other "
        "requests in flight (0.6.0 polls a non-blocking flock from the loop for the same reason).",
    upstream="vllm-project/speculators#424, #566 (in 0.6.0)",
    removal="when speculators 0.5.0 is no longer supported",
    target="speculators",
    versions={"speculators": ">=0.5,<0.6", "vllm": ">=0.22"},
    requires={"serve.connector.lock": ("flock",)},
    variant_probe="serve.speculators.lock_wait",
    symptom=("No such file or directory", "a partially written safetensors file"),
    edits={
        "no": {
            CLIENT: (
                insert_before(
                    '    return completion.kv_transfer_params.get("hidden_states_path")\n',
                    fenced(ID, '    _path = completion.kv_transfer_params.get("hidden_states_path")\n'
                               "    if _path:\n"
                               "        import fcntl, os\n"
                               '        if os.path.exists(_path + ".lock"):\n'
                               '            with open(_path + ".lock") as _lock:\n'
                               "                fcntl.flock(_lock, fcntl.LOCK_SH)  # sleeps until the writer is done\n",
                           "    "),
                ),
                insert_before(
                    "    return extract_output(completion, token_ids)\n\n\n@with_retries\ndef generate_hidden_states(",
                    fenced(ID, "    return await asyncio.to_thread(extract_output, completion, token_ids)\n", "    "),
                ),
            )
        }
    },
)
