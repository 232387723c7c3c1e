"""A checkpoint's config.json is read in one place (compat.checkpoint), the text model's value first.

Kimi-K2.5's config.json wraps a DeepSeek-V3 text model in ``text_config``: its 61 decoder layers are what vLLM runs
and captures.  Two readers once disagreed on such a wrapper (one read the top level first), so the generator path
and the serve path could name different depths for the same checkpoint.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from compat import checkpoint

ROOT = Path(__file__).resolve().parents[2]
#: a wrapper whose top level says other numbers than its text model, so the test sees which one wins
WRAPPER = {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25", "num_hidden_layers": 27,
           "hidden_size": 1152, "vocab_size": 99, "max_position_embeddings": 4096,
           "text_config": {"model_type": "deepseek_v3", "num_hidden_layers": 61, "hidden_size": 7168,
                           "vocab_size": 163840, "max_position_embeddings": 262144}}
PLAIN = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 4, "hidden_size": 128,
         "vocab_size": 512, "max_position_embeddings": 2048}


def _model(tmp_path, config, name: str = "m") -> str:
    path = tmp_path / name
    path.mkdir()
    (path / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    return str(path)


def test_a_wrappers_text_model_wins_over_its_top_level(tmp_path):
    model = _model(tmp_path, WRAPPER)
    assert checkpoint.num_layers(model) == 61
    assert checkpoint.hidden_size(model) == 7168
    assert checkpoint.max_positions(model) == 262144
    assert checkpoint.text_value(checkpoint.read_config(model), "vocab_size") == 163840


def test_the_top_level_fills_what_the_text_model_does_not_say(tmp_path):
    config = {**WRAPPER, "text_config": {"model_type": "deepseek_v3", "num_hidden_layers": 61}}
    model = _model(tmp_path, config)
    assert (checkpoint.num_layers(model), checkpoint.hidden_size(model)) == (61, 1152)
    assert checkpoint.max_positions(model) == 4096


def test_a_plain_config_is_its_own_text_model(tmp_path):
    model = _model(tmp_path, PLAIN)
    config = checkpoint.read_config(model)
    assert checkpoint.text_config(config) is config
    assert (checkpoint.num_layers(model), checkpoint.hidden_size(model), checkpoint.max_positions(model)) == \
        (4, 128, 2048)


def test_values_the_config_does_not_give_are_none(tmp_path):
    model = _model(tmp_path, {"model_type": "llama", "num_hidden_layers": 2})
    assert (checkpoint.hidden_size(model), checkpoint.max_positions(model)) == (None, None)
    with pytest.raises(KeyError, match="num_hidden_layers"):
        checkpoint.num_layers(_model(tmp_path, {"model_type": "llama"}, "no-depth"))


def test_a_folder_without_config_json_is_not_local_and_reading_it_names_the_file(tmp_path):
    assert not checkpoint.is_local(str(tmp_path))
    assert not checkpoint.is_local("org/hub-model")
    assert checkpoint.is_local(_model(tmp_path, PLAIN))
    with pytest.raises(OSError, match=re.escape(str(tmp_path / "config.json"))):
        checkpoint.read_config(str(tmp_path))
    with pytest.raises(OSError):
        checkpoint.num_layers(str(tmp_path))


def test_a_config_that_is_not_a_json_object_is_a_value_error_naming_the_file(tmp_path):
    broken = _model(tmp_path, "{not json", "broken")
    with pytest.raises(ValueError, match=re.escape(str(Path(broken) / "config.json"))):
        checkpoint.read_config(broken)
    with pytest.raises(ValueError, match="not a JSON object"):
        checkpoint.read_config(_model(tmp_path, "[1, 2]", "a-list"))


#: a path built to a config.json (``/ "config.json"``, ``join(..., "config.json")``): a read of it
CONFIG_PATH = re.compile(r'/\s*"config\.json"|"config\.json"\s*\)')


def test_only_compat_checkpoint_builds_a_path_to_config_json():
    """Every other module asks compat.checkpoint; "config.json" may still stand in their messages and docstrings."""
    readers = [f"{path.relative_to(ROOT)}:{number}" for path in sorted((ROOT / "compat").rglob("*.py"))
               if path.name != "checkpoint.py" or path.parent.name != "compat"
               for number, line in enumerate(path.read_text().splitlines(), 1) if CONFIG_PATH.search(line)]
    assert readers == []


def test_the_scan_sees_a_reader():
    """Mutation: the two ways the readers were written are both caught."""
    assert CONFIG_PATH.search('config = json.loads((Path(model) / "config.json").read_text())')
    assert CONFIG_PATH.search('if not os.path.isfile(os.path.join(args.model, "config.json")):')
    assert not CONFIG_PATH.search('return _usage(f"{args.model} is not a local HF checkpoint (no config.json)")')
