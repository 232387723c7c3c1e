"""Decode a Python source file for editing and encode it back exactly as it was written.

Edits are written with ``\\n`` and as text, so a file is decoded with its
PEP 263 encoding, its line endings are normalised to ``\\n`` while editing and
restored afterwards: a CRLF file stays all CRLF, a latin-1 file stays latin-1.
Anything this cannot round-trip is a :class:`TextProblem`, never a traceback.
"""

from __future__ import annotations

import io
import tokenize
from dataclasses import dataclass


class TextProblem(ValueError):
    """The file cannot be edited as text without changing bytes we did not mean to change."""


@dataclass(frozen=True)
class Style:
    encoding: str
    newline: str


def decode(data: bytes, relpath: str) -> tuple[str, Style]:
    """``(text with \\n line endings, how to write it back)``."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:  # undecodable first lines, or a cookie naming no codec
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as bad:
            raise TextProblem(f"{relpath} is not valid utf-8 at byte {bad.start} and declares no other encoding; "
                              f"this kit edits source text only") from exc
        raise TextProblem(f"{relpath}: unusable source encoding declaration ({exc})") from exc
    try:
        text = data.decode(encoding)
    except (UnicodeDecodeError, LookupError) as exc:
        where = f" at byte {exc.start}" if isinstance(exc, UnicodeDecodeError) else ""
        raise TextProblem(f"{relpath} is not valid {encoding}{where}; this kit edits source text only") from exc
    crlf, lf = text.count("\r\n"), text.count("\n")
    if crlf and crlf != lf:
        raise TextProblem(f"{relpath} mixes line endings ({crlf} CRLF, {lf - crlf} LF); refusing to add more")
    if crlf:
        text = text.replace("\r\n", "\n")
    return text, Style(encoding, "\r\n" if crlf else "\n")


def encode(text: str, style: Style, relpath: str) -> bytes:
    if style.newline != "\n":
        text = text.replace("\n", style.newline)
    try:
        return text.encode(style.encoding)
    except UnicodeEncodeError as exc:
        raise TextProblem(f"{relpath}: the patched text cannot be written as {style.encoding}") from exc


def normalised(data: bytes) -> str:
    """Best-effort text for searching (verify's markers): decoded, ``\\n`` line endings, never raises."""
    try:
        return decode(data, "")[0]
    except TextProblem:
        return data.decode("utf-8", "replace").replace("\r\n", "\n")
