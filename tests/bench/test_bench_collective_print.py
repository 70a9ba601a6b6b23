"""python -m distlab.bench collective's printed report fits a 110-column window: the head lines
say once what every row shares, the table keeps nccl-tests' measured and model columns (pure:
no rank is started)."""

from __future__ import annotations

import pytest

from distlab.bench import collective as bench
from distlab.collectives.algorithms.registry import PLANS
from distlab.report.table import format_table

WIDTH = 110


def _rows(op: str) -> list[dict]:
    """Rows as the benchmark makes them, at the widest values a run prints (1 GiB, slow)."""
    nbytes = 1 << 30
    return [{"nbytes": nbytes, "count": nbytes // 4, "dtype": "float32", "op": "sum", "root": 0,
             "algorithm": a, "time_us": 98765432.1, "algbw_gbps": 123.456, "busbw_gbps": 246.912,
             "wrong": 0, "predicted_us": 98765432.1, "error_pct": -99.9, "vs_builtin": 123.45}
            for a in [*PLANS[op], "builtin"]]


@pytest.mark.parametrize("op", sorted(PLANS))
def test_head_lines_and_table_fit_in_110_columns(op: str) -> None:
    config = bench.CollectiveConfig(op=op, root=1, redop="max", world_size=16, iters=1000,
                                    warmup=100)
    head = bench.head_lines(config, None if op == "barrier" else 0.9375,
                            (123.45, 1.0, 1.0), (234.56, 1.0, 1.0))
    lines = [f"# {line}" for line in head] + format_table(_rows(op), bench.COLUMNS).splitlines()
    wide = [line for line in lines if len(line) > WIDTH]
    assert not wide, wide
    text = "\n".join(head)
    assert f"{op}" in text and "16 gloo ranks: 1000 rounds (+100 warmup)" in text
    if op != "barrier":
        assert "float32" in text and "count = size / 4 elements" in text
        assert "busbw = algbw x 0.9375 (nccl-tests' factor)" in text
    assert ("redop max" in text) == (op in ("all_reduce", "reduce", "reduce_scatter"))
    assert ("root 1" in text) == (op in ("broadcast", "reduce", "gather", "scatter"))
    assert "load average before 123.45, after 234.56" in text


def test_the_table_shows_what_differs_between_rows() -> None:
    headers = [c.header for c in bench.COLUMNS]
    assert headers == ["size(B)", "algorithm", "time(us)", "algbw(GB/s)", "busbw(GB/s)",
                       "#wrong", "predicted(us)", "error%", "vs builtin(x)"]


def test_long_comment_lines_break_after_a_comma() -> None:
    line = ("recursive_doubling busbw / builtin over 5 sizes (64K-16M): lowest 0.21x at 256K, "
            "median 0.48x, highest 1.46x at 16M")
    assert len(line) > bench.COMMENT_WIDTH
    first, second = bench._fit([line])
    assert first.endswith("median 0.48x,") and second == "  highest 1.46x at 16M"
    assert bench._fit(["short", ""]) == ["short", ""]
