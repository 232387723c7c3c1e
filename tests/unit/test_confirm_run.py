"""``compat.confirm.run(RunSpec(...))`` end to end on a stand-in generator (no vLLM; torch for the tensors).

The stand-in has the generator's shape (``VllmHiddenStatesGenerator(model, **kwargs)``, ``generate(prompts)``,
``vllm_config``, ``scheduler``, ``executor``) and returns given states, so the runner's plumbing is checked:
the verdict, the automatic bound per reference, the invariants, the hooks, and a capture bug turning WRONG.
The real generator on real vLLM: tests/contract (the harness drives it through this same entry).
"""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")

from compat.confirm import Reference, RunSpec, run  # noqa: E402
from compat.confirm.compare import invariant_calls  # noqa: E402

PROMPTS = [[5, 6, 7], [8, 9], [10, 11, 12, 13]]


def _state(prompt, layer):
    """A deterministic [tokens, 4] state per prompt and layer (what the "engine" captures)."""
    rows = [[float(t + layer + j) for j in range(4)] for t in prompt]
    return torch.tensor(rows)


def _module(shift: int = 0):
    """A generator module whose captures of layer k are the states of layer k + shift."""

    class Scheduler:
        requests: dict = {}

        def schedule(self):
            return types.SimpleNamespace(num_scheduled_tokens={})

    class Executor:
        def shutdown(self):
            pass

    class VllmHiddenStatesGenerator:
        def __init__(self, model, layer_ids, max_model_len=512, tensor_parallel_size=1, dtype="float32",
                     max_num_batched_tokens=None):
            self.layers = layer_ids
            self.vllm_config = types.SimpleNamespace(
                device_config=types.SimpleNamespace(device_type="cpu"),
                cache_config=types.SimpleNamespace(block_size=128),
                scheduler_config=types.SimpleNamespace(max_num_batched_tokens=96, enable_chunked_prefill=True,
                                                       max_num_seqs=256))
            self.scheduler, self.executor = Scheduler(), Executor()

        def generate(self, prompts):
            return [{"input_ids": torch.tensor(p), "hidden_states": [_state(p, k + shift) for k in self.layers]}
                    for p in prompts]

    return types.SimpleNamespace(VllmHiddenStatesGenerator=VllmHiddenStatesGenerator)


def _spec(tmp_path, shift=0, **fields):
    calls = [PROMPTS[:1], PROMPTS]
    batch, repeat = invariant_calls(calls[0], PROMPTS)
    calls += [batch, repeat]
    refs = {tuple(p): [_state(p, k) for k in range(2)] for c in calls for p in c}
    return RunSpec(model=str(tmp_path), calls=calls, layers=[0, 1], reference=Reference(None, refs, 2),
                   generator=_module(shift), checks={"batch": 2, "repeat": 3}, hidden_size=4,
                   log_path=tmp_path / "vllm.log", **fields)


def test_a_right_run_is_ok_with_its_invariants(tmp_path):
    doc = run(_spec(tmp_path))
    assert doc["verdict"] == "OK" and doc["exit_code"] == 0 and doc["error"] is None
    assert [c["n"] for c in doc["calls"]] == [1, 3, 33, 1]
    assert doc["invariants"]["repeat"]["identical"] and not doc["invariants"]["problems"]
    assert doc["precision"]["precision"] == "float32" and doc["rtol"] == 1e-3  # a given reference: HF's row


def test_a_shifted_capture_is_wrong_at_every_layer(tmp_path):
    doc = run(_spec(tmp_path, shift=1))
    assert doc["verdict"] == "WRONG" and doc["exit_code"] == 1
    assert all(any(p.startswith(f"layer {k}:") for p in doc["calls"][0]["problems"]) for k in (0, 1))


def test_the_hooks_see_the_import_and_the_reference(tmp_path):
    seen = []
    doc = run(_spec(tmp_path, on_imported=lambda extra: seen.append("imported"),
                    on_reference=lambda reference, meta: seen.append(("reference", reference.depth))))
    assert doc["verdict"] == "OK" and seen == ["imported", ("reference", 2)]


def test_after_observes_the_live_engine(tmp_path):
    doc = run(_spec(tmp_path, after=lambda gen: {"block_size": gen.vllm_config.cache_config.block_size}))
    assert doc["runtime"] == {"block_size": 128}


def test_an_exception_in_the_run_is_an_error_with_the_report(tmp_path):
    def boom(gen):
        raise RuntimeError("observer failed")

    doc = run(_spec(tmp_path, after=boom))
    assert doc["verdict"] == "ERROR" and doc["error"]["type"] == "RuntimeError" and doc["exit_code"] == 1
