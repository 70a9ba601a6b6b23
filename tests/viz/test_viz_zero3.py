"""Stage 3's figures draw what the models and measurements say, without collisions: the peak
bars (model stacked, measured beside), the prefetch model with its crossover, and the traced
steps' Gantt charts."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from distlab.collectives.model.presets import get_preset  # noqa: E402
from distlab.viz.layout_check import layout_problems  # noqa: E402
from distlab.viz.zero3 import peak_figure, prefetch_figure, stage3_gantts  # noqa: E402
from distlab.zero.prefetch_model import crossover, unit_times  # noqa: E402


def _row(prefetch: int, peak: int) -> dict:
    return {"prefetch": prefetch, "precision": "fp32", "peak_bytes": peak,
            "model": {"states": 500 * 1024, "total": 700 * 1024 + prefetch * 60 * 1024}}


def test_peak_figure_stacks_the_model_and_draws_the_measurement():
    rows = [_row(0, 703 * 1024), _row(1, 770 * 1024)]
    fig = peak_figure(rows)
    ax = fig.axes[0]
    assert ax.get_ylabel() == "bytes per rank (KiB)"
    heights = [p.get_height() for p in ax.patches]
    assert heights == pytest.approx([500, 500, 200, 260, 703, 770])
    assert layout_problems(fig) == []


def test_prefetch_figure_marks_the_crossover():
    preset = get_preset("nvlink4_h100")
    fig = prefetch_figure(10_000_000, 8, 8, preset, 100e12, [2**k for k in range(4, 14)])
    ax = fig.axes[0]
    labels = [ln.get_label() for ln in ax.lines]
    assert labels[:4] == ["compute only", "prefetch 0", "prefetch 1", "prefetch 2"]
    f = crossover(unit_times([10_000_000], 8, preset, forward_s=[2e7 / 100e12],
                             itemsize=2)[0], 8, 1)
    vertical = [ln.get_xdata()[0] for ln in ax.lines if ln.get_linestyle() == ":"]
    assert vertical == [pytest.approx(f / (2e7 / 100e12))]
    assert layout_problems(fig) == []


def test_gantts_one_chart_per_trace_with_rank_lanes():
    spans = [{"name": n, "category": c, "lane": f"rank{r}/{c}", "start_us": s,
              "duration_us": 10.0, "args": {}}
             for r in (0, 1)
             for n, c, s in (("forward unit 0", "forward", 0.0),
                             ("all-gather unit 1 (forward)", "all_gather", 1.0),
                             ("Adam step", "step", 30.0))]
    fig = stage3_gantts({"prefetch 1": spans, "prefetch 0": spans[:3]})
    assert [ax.get_title() for ax in fig.axes if ax.get_title()] == ["prefetch 1", "prefetch 0"]
    ticks = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert ticks == ["rank0/forward", "rank0/all_gather", "rank0/step"]
