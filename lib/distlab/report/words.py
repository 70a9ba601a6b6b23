"""How a report says a count or a ratio in words: ``1 bucket`` / ``2 buckets``, ``2.00x slower``.

A ratio below one read as "0.49x faster" says the opposite of what happened; :func:`times` turns
it around (``2.04x slower``) so every comparison line reads the way a person would say it.
"""

from __future__ import annotations

import math

__all__ = ["count", "seconds", "times"]


def count(n: int, singular: str, plural: str | None = None) -> str:
    """``n`` with the noun agreeing: ``count(1, "bucket")`` -> ``"1 bucket"``, ``count(3,
    "bucket")`` -> ``"3 buckets"`` (``plural`` for irregular nouns)."""
    noun = singular if n == 1 else (plural if plural is not None else f"{singular}s")
    return f"{n} {noun}"


def seconds(value: float, digits: int = 3) -> str:
    """``value`` seconds as a plain number with ``digits`` significant digits and its unit,
    never in exponent notation: ``seconds(2793.57)`` -> ``"2794 s"``, ``seconds(33.379)`` ->
    ``"33.4 s"``, ``seconds(0.6012)`` -> ``"0.601 s"``, ``seconds(0)`` -> ``"0 s"``. The one
    way the planner's lines, titles and figures write a time."""
    if not math.isfinite(value):
        return f"{value} s"
    if value == 0:
        return "0 s"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{value:.{decimals}f} s"


def times(ratio: float, better: str, worse: str, digits: int = 2) -> str:
    """``ratio`` (ours over theirs, higher is better) as ``"2.04x faster"`` or, below one, its
    inverse with the other word: ``times(0.49, "faster", "slower")`` -> ``"2.04x slower"``.
    Equal rounds to ``1.00x <better>``; infinite or zero say ``"inf"``."""
    if ratio is None or math.isnan(ratio):
        return f"n/a {better}"
    if ratio >= 1 or round(ratio, digits) >= 1:
        return f"{ratio:.{digits}f}x {better}" if math.isfinite(ratio) else f"infx {better}"
    if ratio <= 0:
        return f"infx {worse}"
    return f"{1 / ratio:.{digits}f}x {worse}"
