"""The facts both pipelines read from a local Hugging Face checkpoint's config.json, read in one place.

Why one reader: the serve path and the generator path both need the depth, the width and the context limit of
the model they run, and two readers had drifted apart (one read the top level first, the other the text model).
A multimodal wrapper such as Kimi-K2.5's ``KimiK25ForConditionalGeneration`` keeps its decoder's facts in
``text_config`` (a DeepSeek-V3 text model), and the decoder is what vLLM runs and captures, so the text model's
value wins everywhere; the top level is only the fallback for a value the text model does not give.
"""

from __future__ import annotations

import json
from pathlib import Path

CONFIG = "config.json"


def config_path(model: str) -> Path:
    return Path(model) / CONFIG


def is_local(model: str) -> bool:
    """A local checkpoint: a directory holding a config.json (not a hub name, not a file)."""
    return bool(model) and config_path(model).is_file()


def read_config(model: str) -> dict:
    """The checkpoint's config.json as a dict.

    Raises OSError where it cannot be read (the error names the file), json.JSONDecodeError naming the file
    where it is not JSON, and ValueError where it is JSON but not an object: callers that tolerate an unreadable
    config catch ``(OSError, ValueError)``."""
    path = config_path(model)
    text = path.read_text()
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise json.JSONDecodeError(f"{path}: {exc.msg}", exc.doc, exc.pos) from None
    if not isinstance(config, dict):
        raise ValueError(f"{path}: not a JSON object")
    return config


def text_config(config: dict) -> dict:
    """The text model's config: a wrapper's ``text_config`` where it is a non-empty dict, else the config itself."""
    text = config.get("text_config")
    return text if isinstance(text, dict) and text else config


def text_value(config: dict, key: str):
    """``key`` of the text model, else of the top level, else None."""
    value = text_config(config).get(key)
    return config.get(key) if value is None else value


def num_layers(model: str) -> int:
    """The text model's number of decoder layers (``num_hidden_layers``); KeyError naming the file if none is given."""
    layers = text_value(read_config(model), "num_hidden_layers")
    if layers is None:
        raise KeyError(f"{config_path(model)} gives no num_hidden_layers")
    return int(layers)


def hidden_size(model: str) -> int | None:
    """The text model's ``hidden_size``, or None where the config does not give one."""
    size = text_value(read_config(model), "hidden_size")
    return int(size) if size else None


def max_positions(model: str) -> int | None:
    """The text model's context limit (``max_position_embeddings``), or None where the config does not give one."""
    limit = text_value(read_config(model), "max_position_embeddings")
    return int(limit) if limit else None
