"""Is a figure written on a page held by its record?  Shared by the generated pages' tests (README, self-reference)."""

from __future__ import annotations

import math


def held(figure: str, words: set[str], numbers: list[float]) -> bool:
    """The figure as written, or a number it rounds (3 significant digits: within 0.5 %); a version only as written."""
    if figure in words:
        return True
    if figure.count(".") > 1:
        return False
    value = float(figure)
    near = numbers + [float(w) for w in words if w.count(".") <= 1]
    return math.isfinite(value) and any(
        math.isfinite(n) and (abs(value - n) <= 5e-3 * abs(n) or value == n == 0) for n in near)


def figures_of_doc(doc, pattern, skip: tuple[str, ...] = ()) -> tuple[set[str], list[float]]:
    """Every figure a JSON document holds: its numbers, and ``pattern``'s matches in its strings and keys; the values
    under a key in ``skip`` are left out (a commit's hex is no figure)."""
    words, numbers = set(), []

    def walk(value, key=None):
        if isinstance(value, bool) or key in skip:
            return
        if isinstance(value, (int, float)):
            numbers.append(float(value))
        elif isinstance(value, str):
            words.update(pattern.findall(value))
        elif isinstance(value, dict):
            for k, item in value.items():
                words.update(pattern.findall(str(k)))
                walk(item, k)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(doc)
    return words, numbers
