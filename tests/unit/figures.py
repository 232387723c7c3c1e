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
