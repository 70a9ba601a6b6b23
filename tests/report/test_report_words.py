"""Counts and ratios in words: the noun agrees, a ratio below one is turned around."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from distlab.report.words import count, times


def test_counts_agree() -> None:
    assert [count(n, "bucket") for n in (0, 1, 2)] == ["0 buckets", "1 bucket", "2 buckets"]
    assert count(1, "process", "processes") == "1 process"
    assert count(4, "process", "processes") == "4 processes"


def test_a_ratio_below_one_reads_the_other_way() -> None:
    assert times(0.49, "faster", "slower") == "2.04x slower"   # never "0.49x faster"
    assert times(2.98, "faster", "slower") == "2.98x faster"
    assert times(1.0, "less", "more") == "1.00x less"
    assert times(0.999, "faster", "slower") == "1.00x faster"  # rounds to even: no "1.00x slower"


@given(st.floats(1e-3, 1e3))
def test_the_number_shown_is_never_below_one(ratio: float) -> None:
    text = times(ratio, "faster", "slower")
    value, word = text.split("x ")
    assert float(value) >= 1.0
    assert word == ("faster" if ratio >= 0.995 else "slower")


def test_seconds_are_plain_numbers_at_every_magnitude() -> None:
    from distlab.report.words import seconds

    assert [seconds(v) for v in (2793.57, 33.379, 3.07, 0.6012, 0.0, 123456.7)] == [
        "2794 s", "33.4 s", "3.07 s", "0.601 s", "0 s", "123457 s"]
    assert seconds(12.34, 2) == "12 s"
    for k in range(-5, 8):
        assert "e" not in seconds(1.234 * 10**k)
