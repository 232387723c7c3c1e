"""The facts both pipelines read from a local Hugging Face checkpoint's config.json, read in one place.

Why one reader: the serve path and the generator path both need the depth, the width and the context limit of
the model they run, and two readers had drifted apart (one read the top level first, the other the text model).
A multimodal wrapper such as Kimi-K2.5's ``KimiK25ForConditionalGeneration`` keeps its decoder's facts in
``text_config`` (a DeepSeek-V3 text model), and the decoder is what vLLM runs and captures, so the text model's
value wins everywhere; the top level is only the fallback for a value the text model does not give.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class Checkpoint:
    """A local checkpoint's facts, read once per command and handed down as values (``compat confirm`` reads it
    when its options are read; every part of either pipeline then takes what it needs from here, not from disk)."""

    path: str
    config: dict = field(default_factory=dict, compare=False)
    num_layers: int | None = None
    hidden_size: int | None = None
    max_positions: int | None = None
    vocab_size: int | None = None
    unread: str = ""  # why config.json could not be read ('' when it was)

    @classmethod
    def read(cls, model: str) -> "Checkpoint":
        """The checkpoint at ``model``; a config that cannot be read gives a Checkpoint whose ``unread`` says why."""
        try:
            config = read_config(model)
        except (OSError, ValueError) as exc:
            return cls(str(model), unread=str(exc))
        facts = {key: _as_int(text_value(config, name)) for key, name in (
            ("num_layers", "num_hidden_layers"), ("hidden_size", "hidden_size"),
            ("max_positions", "max_position_embeddings"), ("vocab_size", "vocab_size"))}
        return cls(str(model), config, **facts)

    @property
    def text(self) -> dict:
        """The text model's config (a wrapper's ``text_config``)."""
        return text_config(self.config)


def _as_int(value) -> int | None:
    try:
        return int(value) if value else None
    except (TypeError, ValueError):
        return None
