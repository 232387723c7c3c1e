"""The serve-path manifest and the layer-id converter, against the conventions' published facts."""

from __future__ import annotations

import json

import pytest

from compat.serve.manifest import (FILENAME, POST_NORM, PRE_NORM, Manifest, ManifestError, convert_ids, id_of,
                                   tensor_of)

L = 61  # Kimi-K2.5's num_hidden_layers


def test_vllm_ids_are_the_residual_entering_each_layer_and_L_the_pre_norm_final():
    # vLLM docs / speculators >= 0.5: id k = HF hidden_states[k]; id L = final, "not normalized"
    assert tensor_of("vllm-entering", 0, L) == ("hf", 0)
    assert tensor_of("vllm-entering", 30, L) == ("hf", 30)
    assert tensor_of("vllm-entering", L, L) == PRE_NORM


def test_sglang_explicit_ids_are_one_later():
    # research §6: SGLang serves a config value [2, 30, 58] as entering layers [3, 31, 59]
    assert convert_ids([2, 30, 58], "output-of-layer", "vllm-entering", L) == [3, 31, 59]
    # and the output of the last layer is vLLM's final id
    assert convert_ids([L - 1], "output-of-layer", "vllm-entering", L) == [L]


def test_modelopt_hf_final_is_post_norm_and_has_no_vllm_id():
    assert tensor_of("modelopt-hf", L - 1, L) == POST_NORM  # hidden_states[-1] of HF is post-norm
    with pytest.raises(ManifestError, match="no id"):
        convert_ids([L - 1], "modelopt-hf", "vllm-entering", L)
    assert convert_ids([1, 29], "modelopt-hf", "vllm-entering", L) == [2, 30]


def test_torchspec_final_is_the_state_entering_the_last_layer():
    # TorchSpec appends num_layers - 1 as "final" in vLLM's numbering: the input of the last layer
    assert tensor_of("torchspec-vllm", L - 1, L) == ("hf", L - 1)
    assert convert_ids([L - 1], "torchspec-vllm", "vllm-entering", L) == [L - 1] != [L]


def test_embeddings_have_no_output_of_layer_id():
    with pytest.raises(ManifestError):
        id_of("output-of-layer", ("hf", 0), L)


def test_round_trip_between_vllm_and_output_of_layer():
    ids = [1, 2, 30, 58]
    assert convert_ids(convert_ids(ids, "vllm-entering", "output-of-layer", L), "output-of-layer", "vllm-entering", L) == ids


def kimi(**over):
    fields = dict(vllm="0.25.0", speculators="0.9.0", connector="ExampleHiddenStatesConnector",
                  connector_version=None, num_layers=L, ids=[2, 30, 58, 61], final_id=61, dtype="bfloat16",
                  tensor_parallel=8)
    fields.update(over)
    return Manifest(**fields)


def test_rows_ascend():
    manifest = kimi(ids=[58, 2, 61, 30])
    assert manifest.rows == [2, 30, 58, 61]
    assert manifest.row(61) == 3 and manifest.final_is_last_row


def test_repeated_ids_are_refused():
    # vLLM 0.17-0.33 never write such a file: "The expanded size of the tensor (5) must match the existing size (4)"
    with pytest.raises(ManifestError, match="repeat"):
        kimi(ids=[58, 2, 61, 2, 30])


def test_final_not_largest_is_flagged():
    # the trainer takes hidden_states[:, -1]: wrong when the final id is not the largest
    assert not kimi(ids=[2, 30, 58, 61], final_id=58).final_is_last_row


def test_written_beside_the_data_and_read_back(tmp_path):
    path = kimi().write(tmp_path)
    assert path.name == FILENAME
    doc = json.loads(path.read_text())
    assert doc["convention"] == "vllm-entering" and doc["rows"] == [2, 30, 58, 61]
    assert doc["tensors"][-1] == ["final", "pre-norm"]
    assert Manifest.read(tmp_path) == kimi()
    assert kimi().in_convention("output-of-layer") == [1, 29, 57, 60]


@pytest.mark.parametrize("bad, match", [
    (dict(ids=[]), "empty"),
    (dict(ids=[2, 62]), "outside"),
    (dict(final_id=60), "not one of"),
    (dict(convention="sglang"), "unknown layer-id convention"),
    (dict(tensor_parallel=0), "tensor_parallel"),
])
def test_bad_input_is_a_clear_error(bad, match):
    with pytest.raises(ManifestError, match=match):
        kimi(**bad)


def test_unreadable_manifest_is_a_clear_error(tmp_path):
    (tmp_path / FILENAME).write_text("{not json")
    with pytest.raises(ManifestError, match="cannot read"):
        Manifest.read(tmp_path)
