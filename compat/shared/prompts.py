"""``compat confirm --prompts FILE``: the prompts file format, parsed and checked before anything runs.

Two forms, chosen by the file name:

``*.json``
    one JSON array; each item is one prompt: a string (text) or an array of
    token ids (non-negative integers), e.g. ``["Hello there", [1, 422, 9, 77]]``.

any other name: one prompt per line
    * blank lines and lines starting with ``#`` are skipped;
    * a JSON array of integers (``[1, 422, 9, 77]``) is token ids;
    * a line of whitespace-separated integers only (``1 422 9 77``) is token ids;
    * ``text:`` followed by anything is text (for text made only of digits);
    * any other line is text.

Text is tokenized with the checkpoint's own tokenizer
(``AutoTokenizer.from_pretrained(MODEL).encode(text)``, so with the special
tokens that tokenizer adds by default, e.g. BOS); token ids are used as given.
Every token id must lie in ``0 .. vocab_size - 1`` of the checkpoint's
config.json.  Any problem is a usage error naming ``FILE:LINE`` (exit 2,
nothing run).

Calls take prompts in file order, wrapping around: with ``--calls 1,11,33,11``
call 1 is prompt 1, call 2 prompts 2-12, call 3 prompts 13-45, call 4
prompts 46-56 (a 10-prompt file is cycled).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from compat.checkpoint import Checkpoint, read_config, text_value

_INTS = re.compile(r"^\d+(\s+\d+)*$")


class PromptsError(ValueError):
    """A prompts file that cannot be used; the message names the file and line."""


def parse_prompts(text: str, name: str = "prompts") -> list[tuple[int, str | list[int]]]:
    """``[(line, prompt)]``: prompt is text (str) or token ids (list[int]); raises PromptsError."""
    if name.endswith(".json"):
        return _parse_json(text, name)
    prompts = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("text:"):
            body = line[len("text:"):].strip()
            if not body:
                raise PromptsError(f"{name}:{number}: 'text:' with no text")
            prompts.append((number, body))
        elif line.startswith("["):
            try:
                ids = json.loads(line)
            except json.JSONDecodeError as exc:
                raise PromptsError(f"{name}:{number}: a line starting with '[' must be a JSON array of token ids "
                                   f"({exc.msg})") from None
            prompts.append((number, _ids(ids, f"{name}:{number}")))
        elif _INTS.match(line):
            prompts.append((number, [int(x) for x in line.split()]))
        else:
            prompts.append((number, line))
    if not prompts:
        raise PromptsError(f"{name}: no prompts (blank lines and '#' comments only)")
    return prompts


def _parse_json(text: str, name: str) -> list[tuple[int, str | list[int]]]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PromptsError(f"{name}:{exc.lineno}: not JSON ({exc.msg})") from None
    if not isinstance(doc, list) or not doc:
        raise PromptsError(f"{name}: a .json prompts file must hold a non-empty JSON array of prompts")
    prompts = []
    for index, item in enumerate(doc, 1):
        where = f"{name}: prompt {index}"
        if isinstance(item, str):
            if not item.strip():
                raise PromptsError(f"{where}: empty text")
            prompts.append((index, item))
        else:
            prompts.append((index, _ids(item, where)))
    return prompts


def _ids(value, where: str) -> list[int]:
    if not isinstance(value, list) or not value:
        raise PromptsError(f"{where}: token ids must be a non-empty array of integers")
    if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in value):
        bad = next(x for x in value if not (isinstance(x, int) and not isinstance(x, bool) and x >= 0))
        raise PromptsError(f"{where}: token ids must be non-negative integers, found {bad!r}")
    return list(value)


def vocab_size(model_path: "Checkpoint | str") -> int | None:
    """The text model's vocabulary size, or None where the config does not say or cannot be read (``model_path``:
    the checkpoint as the run read it, or its path)."""
    if isinstance(model_path, Checkpoint):
        return model_path.vocab_size
    try:
        size = text_value(read_config(model_path), "vocab_size")
    except (OSError, ValueError):
        return None
    return int(size) if size else None


def load_prompts(path: str, model_path: "Checkpoint | str", trust_remote_code: bool = False,
                 max_tokens: int | None = None) -> list[list[int]]:
    """The prompts of ``path`` as token ids, checked against the checkpoint; raises PromptsError."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PromptsError(f"cannot read prompts file {path}: {exc}") from None
    parsed = parse_prompts(text, path)
    tokenizer = None
    vocab = vocab_size(model_path)
    model_path = getattr(model_path, "path", model_path)  # the tokenizer loads from the folder
    out = []
    for line, prompt in parsed:
        if isinstance(prompt, str):
            if tokenizer is None:
                try:
                    from transformers import AutoTokenizer

                    tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=trust_remote_code)
                except Exception as exc:  # noqa: BLE001 - any tokenizer failure is the user's to fix
                    raise PromptsError(f"{path}:{line}: text prompts need the checkpoint's tokenizer, which did "
                                       f"not load: {type(exc).__name__}: {exc}") from None
            ids = list(tokenizer.encode(prompt))
            if not ids:
                raise PromptsError(f"{path}:{line}: the text tokenizes to no tokens")
        else:
            ids = prompt
        if vocab is not None and max(ids) >= vocab:
            raise PromptsError(f"{path}:{line}: token id {max(ids)} is outside the vocabulary (vocab_size {vocab})")
        if max_tokens is not None and len(ids) > max_tokens:
            raise PromptsError(f"{path}:{line}: {len(ids)} tokens, more than --max-model-len allows ({max_tokens})")
        out.append(ids)
    return out


def calls_from(prompts: list[list[int]], sizes) -> list[list[list[int]]]:
    """Calls of ``sizes`` sequences taking prompts in order, wrapping around."""
    calls, at = [], 0
    for n in sizes:
        calls.append([prompts[(at + i) % len(prompts)] for i in range(n)])
        at += n
    return calls
