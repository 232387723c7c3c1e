"""``compat confirm --reference vllm-extract`` on the tiny DeepSeek-V3 and Kimi-K2.5 (MLA + MoE), held against HF.

What must hold: vLLM's own EAGLE-3 ``extract_hidden_states`` path (the reference
``compat confirm --reference vllm-extract`` uses, ``compat.confirm.reference.vllm_extract``)
agrees with Hugging Face on both tiny models, and confirm's verdict on them is OK.

One real command line per model, in a child: ``compat confirm --reference vllm-extract
--layers 2,4,5,7`` (the 8-layer analogue of Kimi-K2.5's 2/30/58, +7 the last layer: see
fixtures/tiny_mla.py), every needed patch applied.  The child hooks
``on_reference`` of ``compat.confirm.main`` only to save what it returned (refs and meta) as it
ran, so the reference is held against HF without a second engine.  That reference call is one
vLLM ``generate`` of every unique prompt of the run (the calls 1, 11, 33, 11 and the invariant
batch of 33, less the repeated first call: 88 prompts, 25114 tokens, 4 layers each).

Expectations come from Hugging Face only: float32 ``output_hidden_states`` of the same prompts,
computed in this process (``fixtures.tiny_mla.load_hf``, the Kimi wrapper included).  Index
semantics (compat/confirm/extract.py's docstring): generator layer id k = vLLM aux id k + 1 =
HF ``hidden_states[k + 1]``; the last layer (7) is pre-norm in vLLM and normed in HF, so the
test applies HF's final norm to vLLM's aux id 8, as the tiny Llama's test does.  Statistic:
max|diff| / mean|h_ref| per layer over every prompt, held to the kit's 1e-3 as the other MLA
tests (vLLM's own CPU MLA forward vs HF: <= 4.4e-6, test_mla_models.py).

Figures and the engine's cost: docs/mla-models.md ("vLLM's extract_hidden_states reference").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from compat.confirm import choose
from tests.contract.amx_host import mla_needs_cpu_mla
from tests.contract.conftest import CACHE, ROOT, compat

pytestmark = pytest.mark.mla

LAYERS = (2, 4, 5, 7)  # fixtures.tiny_mla.SCALED_EAGLE3_LAYERS
AUX_IDS = [3, 5, 6, 8]  # vLLM's ids for them (k + 1), written from vLLM's source, not from the kit
TIGHT = 1e-3  # the kit's tolerance, as test_mla_models.py
CALLS = [1, 11, 33, 11]  # confirm's default calls; it adds the invariant batch of 33 and the first call again

#: compat confirm's own main(), run_reference wrapped to save (refs, meta) to argv[1] as it returned them.
TEE = """
import sys
import torch
from compat.confirm_command import main
def save(reference, meta):
    torch.save({"refs": reference.refs, "meta": meta}, sys.argv[1])
sys.exit(main(sys.argv[2:], on_reference=save))
"""


def _vllm_version() -> str:
    """The version of the distribution that owns the imported vLLM (test_confirm_options derives it)."""
    from tests.contract.test_confirm_options import _vllm_version as owner_version

    found = owner_version()
    assert found is not None, "no distribution owns the imported vllm"
    return str(found)


@pytest.fixture(scope="module", params=["deepseek", "kimi"])
def kind(request):
    return request.param


_RUNS: dict = {}


@pytest.fixture(scope="module")
def extract_confirm(kind, vllm_installed, tmp_path_factory):
    """``compat confirm --reference vllm-extract --layers 2,4,5,7`` on the tiny model, every needed patch applied:
    (model path, its run: returncode, output, report path, tee path)."""
    if kind not in _RUNS:
        from fixtures.tiny_mla import build, model_path

        model = build(kind, model_path(kind, CACHE))
        cpu_mla = mla_needs_cpu_mla(model)
        if cpu_mla:  # confirm runs the user's generator, which takes no backend: the kit's plan says NO here
            _RUNS[kind] = (model, {"not_run": f"NOT RUN on this host: {cpu_mla}; compat confirm drives speculators' "
                                              "generator, which takes no attention backend, and the kit's plan says "
                                              "NO for float32 MLA models on such a host (compat/amx.py)"})
        else:
            compat()  # every needed patch applied (confirm runs the patched generator)
            out = tmp_path_factory.mktemp(f"extract-{kind}")
            report, tee, log = out / "report.json", out / "extract.pt", out / "vllm.log"
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            argv = ["--model", model, "--reference", "vllm-extract", "--layers", ",".join(map(str, LAYERS)),
                    "--calls", ",".join(map(str, CALLS)), "--report", str(report), "--log", str(log)]
            proc = subprocess.run([sys.executable, "-c", TEE, str(tee), *argv], cwd=ROOT, env=env, capture_output=True,
                                  text=True, timeout=1500)
            _RUNS[kind] = (model, {"returncode": proc.returncode, "output": proc.stdout + proc.stderr,
                                   "report": report, "tee": tee, "log": log})
    if "not_run" in _RUNS[kind][1]:
        pytest.skip(_RUNS[kind][1]["not_run"])
    return _RUNS[kind]


@pytest.fixture(scope="module")
def tee(extract_confirm):
    import torch

    _, run = extract_confirm
    assert run["tee"].exists(), run["output"][-4000:]
    return torch.load(run["tee"], weights_only=False)


def rel_diffs(got: dict, want: dict, prompts, layers) -> dict:
    """Per layer: max|got - want| over every prompt / mean|want| over every prompt (computed here from scratch)."""
    out = {}
    for j, k in enumerate(layers):
        worst, total, count = 0.0, 0.0, 0
        for p in prompts:
            a, b = got[p][j], want[p][j]
            assert a.shape == b.shape, (k, a.shape, b.shape)
            worst = max(worst, (a - b).abs().max().item())
            total, count = total + b.abs().sum().item(), count + b.numel()
        out[k] = worst / (total / count)
    return out


def test_vllm_extract_equals_hf_at_aux_id_k_plus_1(kind, extract_confirm, tee, capsys):
    import torch

    from fixtures.tiny_mla import load_hf

    model_dir, _ = extract_confirm
    refs, meta = tee["refs"], tee["meta"]
    assert meta["cpu_shim"] and meta["connector"] == "CpuHiddenStatesConnector", meta
    assert meta["aux_ids"] == AUX_IDS, meta
    prompts = list(refs)
    assert len(prompts) > 33 and meta["files"] == len(prompts), (len(prompts), meta)  # one generate() of them all
    model, decoder = load_hf(model_dir)
    depth = decoder.config.num_hidden_layers
    assert depth == 8 and LAYERS[-1] == depth - 1
    hf, got = {}, {}
    with torch.no_grad():
        for p in prompts:
            hs = model(input_ids=torch.tensor([list(p)]), output_hidden_states=True).hidden_states
            assert len(hs) == depth + 1
            hf[p] = [h[0].float() for h in hs]
            # HF's last entry is normed; vLLM's aux id L is the pre-norm output of layer L - 1
            got[p] = [decoder.norm(refs[p][j]) if k == depth - 1 else refs[p][j] for j, k in enumerate(LAYERS)]
    want = {p: [hf[p][k + 1] for k in LAYERS] for p in prompts}
    rel = rel_diffs(got, want, prompts, LAYERS)
    tokens = sum(len(p) for p in prompts)
    with capsys.disabled():
        print(f"\n  {kind}: vllm-extract vs HF float32, max rel diff per layer: "
              + ", ".join(f"{k}: {r:.2e}" for k, r in rel.items())
              + f" (reference engine start {meta['engine_start_s']} s, {len(prompts)} prompts / {tokens} tokens "
              f"in one generate of {meta['generate_s']} s, child {meta['seconds']} s)")
    assert all(r <= TIGHT for r in rel.values()), rel
    # the index can be wrong: vLLM's aux id k+1 is not HF's hidden_states[k] (the output of layer k - 1)
    inner = [k for k in LAYERS if k < depth - 1]
    off_by_one = rel_diffs({p: [refs[p][LAYERS.index(k)] for k in inner] for p in prompts},
                           {p: [hf[p][k] for k in inner] for p in prompts}, prompts, inner)
    with capsys.disabled():
        print(f"  {kind}: off by one (aux id k+1 vs HF hidden_states[k]): "
              + ", ".join(f"{k}: {r:.2f}" for k, r in off_by_one.items()))
    assert all(r > 10 * TIGHT for r in off_by_one.values()), off_by_one


def test_confirm_vllm_extract_is_ok_and_tied_to_the_surface(kind, extract_confirm, tmp_path, capsys):
    _, run = extract_confirm
    assert run["returncode"] == 0, run["output"][-4000:]
    doc = json.loads(run["report"].read_text())
    with capsys.disabled():
        worst = {k: max(c["layers"][k]["rel_diff"] for c in doc["calls"]) for k in doc["calls"][0]["layers"]}
        print(f"\n  {kind}: confirm {doc['verdict']}: generator vs vllm-extract, max rel diff per layer "
              + ", ".join(f"{k}: {r:.1e}" for k, r in worst.items())
              + f"; generator engine start {doc['timings']['engine_start_s']} s, calls "
              + " / ".join(f"{c['n']}: {c['seconds']} s" for c in doc["calls"])
              + f"; reference {doc['timings']['reference_s']} s, total {doc['timings']['total_s']} s")
    assert doc["verdict"] == "OK" and doc["reference"] == "vllm-extract", doc.get("error")
    assert "equal vLLM extract_hidden_states aux id k+1" in run["output"]
    assert doc["layers"] == list(LAYERS) and doc["rtol"] == choose("float32", "cpu", reference="vllm-extract").rtol
    assert doc["dtype"] == "float32"
    ref = doc["reference_run"]
    assert ref["cpu_shim"] and ref["connector"] == "CpuHiddenStatesConnector" and ref["aux_ids"] == AUX_IDS
    assert [c["n"] for c in doc["calls"]] == CALLS + [33, 1]
    assert not [p for c in doc["calls"] for p in c["problems"]]
    assert all(sorted(int(k) for k in c["layers"]) == list(LAYERS) for c in doc["calls"])
    assert max(c["max_rel_diff"] for c in doc["calls"]) <= TIGHT
    assert doc["invariants"]["repeat"]["identical"] and not doc["invariants"]["problems"]
    assert not doc["invariants"]["batch"]["problems"]

    surface = json.loads(compat("--dry-run", "--json").stdout)["surface"]
    assert doc["confirmed"]["fingerprint"] == surface["fingerprint"]
    versions = doc["confirmed"]["versions"]
    assert versions["vllm"] == _vllm_version() and versions["speculators"] == metadata.version("speculators")
    assert versions["torch"] == metadata.version("torch")
    assert versions["transformers"] == metadata.version("transformers")
    assert doc["devices"]["kind"] == "cpu" and doc["tensor_parallel_size"] == 1 == doc["pipeline_parallel_size"]
    timings = doc["timings"]
    assert timings["reference_s"] > 0 and timings["engine_start_s"] > 0 and len(timings["calls_s"]) == 6

    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def check(path) -> int:
        return subprocess.run([sys.executable, "-m", "compat.confirm", "--check", str(path), "--accept-weaker"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=300).returncode

    assert check(run["report"]) == 0
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps({**doc, "confirmed": {**doc["confirmed"], "fingerprint": "0" * 16}}))
    assert check(changed) == 1
