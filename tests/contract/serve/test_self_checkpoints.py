"""``--reference self``'s recompute on the checkpoints users serve, not only the kit's float32 fixtures.

Each checkpoint of fixtures/tiny_checkpoints.py is rebuilt layer by layer by compat.serve.layers.Layers, from the
embedding through every decoder layer, and compared at every id with HF float32 on its "truth" checkpoint (the same
weights in plain float32, written independently of the recompute's code):

* block FP8 (DeepSeek-V3/R1's ``quant_method: fp8``, 128 x 128 blocks, widths off the grid): read from its FP8
  blocks and scales;
* per-layer ``rotary_emb.inv_freq`` tensors (older exporters): dropped, as vLLM drops them;
* a config only remote code reads (Kimi-K2.5's hub layout): read with ``trust_remote_code``, refused without it,
  naming ``--trust-remote-code``.

Right rows must match within ``TOLERANCE`` at every id; a row scaled x3 or zeroed must fail a recompute step by more
than ``FAULT``.  A quantization the recompute does not know is refused by name, never guessed.
"""

from __future__ import annotations

import json
import os

import pytest

from . import records
from .conftest import model_dir

os.environ.setdefault("HF_HUB_OFFLINE", "1")

pytestmark = [pytest.mark.serve]

TOLERANCE = 1e-4
FAULT = 0.2
PROMPTS = ([5, 9, 77, 3, 100, 42, 8], [300, 11, 12, 13, 250, 7, 7, 90, 64, 33, 480, 21, 6, 19, 200, 150, 4, 61, 99])
#: checkpoint -> (its truth checkpoint, Layers' keyword arguments)
CASES = {"fp8": ("fp8-truth", {}), "inv-freq": ("inv-freq-truth", {}),
         "remote": ("fp8-truth", {"trust_remote_code": True})}


@pytest.fixture(scope="module", autouse=True)
def newest_serve_lane():
    records.only_in_newest_serve_lane("the recompute on served checkpoint forms (no server)")


@pytest.fixture(scope="module")
def paths():
    from fixtures import tiny_checkpoints

    return tiny_checkpoints.build(model_dir("self-checkpoints"))


@pytest.fixture(scope="module")
def truths(paths):
    """``{truth checkpoint: (depth, {prompt: HF float32 rows [T, depth + 1, H], ids 0..L})}``."""
    from compat.serve import reference

    out = {}
    for name in {truth for truth, _ in CASES.values()}:
        depth = _depth(paths[name])
        out[name] = depth, reference.hf_rows(paths[name], PROMPTS, list(range(depth + 1)))
    return out


def _depth(model: str) -> int:
    with open(os.path.join(model, "config.json")) as f:
        config = json.load(f)
    return (config.get("text_config") or config)["num_hidden_layers"]


def relative(got, want) -> float:
    """max|got - want| / mean|want|: the recompute's row measure."""
    return float((got.float() - want.float()).abs().max()) / (float(want.float().abs().mean()) or 1.0)


def layers_of(model: str, **kwargs):
    from compat.serve.layers import Layers, WeightIndex

    return Layers(model, WeightIndex.of(model), device="cpu", **kwargs)


def chain(layers, depth: int) -> dict:
    """``{id: [rows per prompt]}`` for ids 0..depth: the embedding, then each layer loaded, run, unloaded."""
    import torch

    states = layers.embed(PROMPTS)
    out = {0: states}
    for number in range(depth):
        layer = layers.load(number)
        states = [layers.forward(layer, rows) for rows in states]
        layers.unload(layer)
        assert all(s.device.type == "cpu" and s.dtype == torch.float32 for s in states)
        out[number + 1] = states
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_every_id_is_recomputed_from_the_checkpoint_as_served(paths, truths, name):
    truth, kwargs = CASES[name]
    depth, rows = truths[truth]
    layers = layers_of(paths[name], **kwargs)
    got = chain(layers, depth)
    errors = {k: max(relative(g, rows[tuple(p)][:, k]) for g, p in zip(got[k], PROMPTS)) for k in got}
    print(name, errors, layers.index.read_bytes)
    assert len(errors) == depth + 1 and max(errors.values()) <= TOLERANCE, errors


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("fault", ["middle id scaled x3", "final id's tail zeroed"])
def test_a_wrong_id_fails_the_recompute_steps_that_touch_it(paths, truths, name, fault):
    truth, kwargs = CASES[name]
    depth, rows = truths[truth]
    wrong = {p: r.clone() for p, r in rows.items()}
    target = depth // 2 if fault == "middle id scaled x3" else depth
    for states in wrong.values():
        if target < depth:
            states[:, target] *= 3
        else:
            states[5:, target] = 0
    layers = layers_of(paths[name], **kwargs)
    steps = [(target - 1, target)] + ([(target, target + 1)] if target < depth else [])
    errors = {}
    for start, end in steps:
        got = layers.run([wrong[tuple(p)][:, start] for p in PROMPTS], range(start, end))
        errors[f"{start}->{end}"] = max(relative(g, wrong[tuple(p)][:, end]) for g, p in zip(got, PROMPTS))
    print(name, fault, errors)
    assert min(errors.values()) > FAULT, errors


def test_the_fixtures_are_the_forms_they_stand_for(paths):
    """What the recompute was given: FP8 blocks with their scales (edge blocks cropped), rotary tables in every
    layer of the inv-freq Llama, the remote wrapper's weights under ``language_model.``; and FP8 matters (the truth
    is not the float32 model it was quantized from)."""
    import torch
    from safetensors import safe_open

    from compat.serve.layers import WeightIndex

    name = "model.layers.1.self_attn.kv_a_proj_with_mqa.weight"
    with safe_open(str(WeightIndex.of(paths["fp8"]).files[name]), "pt") as handle:
        kv_a, scale = handle.get_tensor(name), handle.get_tensor(name + "_scale_inv")
    assert kv_a.dtype == torch.float8_e4m3fn and kv_a.shape == (576, 192) and scale.shape == (5, 2)
    inv = WeightIndex.of(paths["inv-freq"])
    assert sum(n.endswith("rotary_emb.inv_freq") for n in inv.files) == _depth(paths["inv-freq"])
    assert not any("inv_freq" in n for n in inv.layer_names(0).values())  # never read, as vLLM never loads them
    assert all(n.startswith("language_model.") for n in WeightIndex.of(paths["remote"]).files)


def test_block_fp8_changes_the_rows(paths):
    """The truth's rows are not the unquantized model's: a recompute that read float weights would be told apart."""
    from compat.serve import reference

    model = os.path.join(os.path.dirname(paths["fp8"]), "f32")
    ids = list(range(_depth(model) + 1))
    quantized = reference.hf_rows(paths["fp8-truth"], PROMPTS[:1], ids)[tuple(PROMPTS[0])]
    plain = reference.hf_rows(model, PROMPTS[:1], ids)[tuple(PROMPTS[0])]
    assert relative(quantized[:, -1], plain[:, -1]) > 10 * TOLERANCE


def test_remote_code_runs_only_when_trusted(paths):
    from compat.serve.layers import NotRebuilt

    with pytest.raises(NotRebuilt, match="--trust-remote-code"):
        layers_of(paths["remote"])
    assert layers_of(paths["remote"], trust_remote_code=True).config.model_type == "deepseek_v3"


@pytest.mark.parametrize("quantization, named", [
    ({"quant_method": "awq", "bits": 4, "group_size": 128}, "awq"),
    ({"quant_method": "fp8", "activation_scheme": "dynamic"}, "weight_block_size None"),
    ({"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "static", "weight_block_size": [128, 128]}, "static"),
    ({"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"g": {}}},
     "float-quantized"),
])
def test_a_quantization_not_known_here_is_refused_by_name(paths, tmp_path, quantization, named):
    from compat.serve.layers import NotRebuilt

    with open(os.path.join(paths["fp8"], "config.json")) as f:
        config = json.load(f)
    config["quantization_config"] = quantization
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(NotRebuilt, match=named):
        layers_of(str(tmp_path))


def test_an_fp8_weight_without_its_block_scales_is_refused():
    """Read as is, an FP8 weight is off by its scale, unseen: refused, as is a scale of the wrong block grid."""
    import torch

    from compat.serve.layers import BlockFP8, NotRebuilt, dequantize

    weight = torch.randn(200, 192).to(torch.float8_e4m3fn)
    scheme = BlockFP8((128, 128))
    with pytest.raises(NotRebuilt, match="without a weight_scale_inv"):
        dequantize({"o_proj.weight": weight}, scheme)
    with pytest.raises(NotRebuilt, match=r"wants \(2, 2\)"):
        dequantize({"o_proj.weight": weight, "o_proj.weight_scale_inv": torch.ones(1, 2)}, scheme)
    scales = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    out = dequantize({"o_proj.weight": weight, "o_proj.weight_scale_inv": scales}, scheme)["o_proj.weight"]
    assert out.dtype == torch.float32 and out.shape == (200, 192)
    assert torch.equal(out[127, 128:], weight[127, 128:].float() * 2)  # a cropped edge block
    assert torch.equal(out[199, 128:], weight[199, 128:].float() * 4)  # the corner block
    assert torch.equal(out[128, :128], weight[128, :128].float() * 3)
