"""What the sampler benchmark prints (notebook 01's last cell) fits a notebook's width."""

from __future__ import annotations

import pytest

from distlab.bench import sampler as bench
from helpers.figure_guard import MAX_COLUMNS

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("extra_rss", [None, 3.25])
def test_ratio_lines_are_narrow_and_keep_every_ratio(extra_rss: float | None) -> None:
    """The old single ratio line was 139 characters when distlab's growth was below 1 MB."""
    ratios = {"speedup": 2.62, "cpu_speedup": 2.27, "peak_rss": 1.0, "extra_rss": extra_rss}
    for impl in ("distlab", "permutation"):
        lines = bench.ratio_lines(impl, ratios)
        assert all(len(f"# {line}") <= MAX_COLUMNS for line in lines)
        text = " ".join(lines)
        assert f"{impl} vs torch: 2.62x faster, 2.27x less CPU time, 1.00x less peak RSS" in text
        assert ("3.25x less growth above the post-import baseline" if extra_rss else
                f"{impl}'s growth above the post-import baseline is below 1 MB") in text


def test_a_slower_implementation_is_called_slower() -> None:
    """Twice as slow reads "2.04x slower", never "0.49x faster"."""
    ratios = {"speedup": 0.49, "cpu_speedup": 0.5, "peak_rss": 0.8, "extra_rss": 0.25}
    text = " ".join(bench.ratio_lines("distlab", ratios))
    assert "distlab vs torch: 2.04x slower, 2.00x more CPU time, 1.25x more peak RSS" in text
    assert "4.00x more growth above the post-import baseline" in text
    assert "faster" not in text and "less" not in text


def test_every_printed_line_fits(capsys: pytest.CaptureFixture[str]) -> None:
    """A run with every implementation, then one with torch skipped (the longest head)."""
    assert bench.main(["--n", "3000", "--world-size", "4", "--impl", "all"]) == 0
    assert bench.main(["--n", "10000000000", "--world-size", "100000", "--impl", "permutation",
                       "--torch-max-n", "1000", "--seed", "123456789", "--epoch", "987654"]) == 0
    text = capsys.readouterr().out
    wide = [line for line in text.splitlines() if len(line) > MAX_COLUMNS]
    assert wide == [], wide
    assert "torch skipped: n > --torch-max-n 1000" in text and "x less peak RSS" in text
