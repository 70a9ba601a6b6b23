"""The ZeRO explorer says what :mod:`distlab.zero` models for its sliders and marks them."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

from distlab.viz.zero import GIB, ZeroExplorer
from distlab.zero.memory_model import largest_model_that_fits, zero_memory


def test_the_explorer_reads_out_the_memory_model() -> None:
    ex = ZeroExplorer(params_b=7.5, world_size=64, stage=2, gpu_gib=80.0)
    m = zero_memory(int(7.5e9), 64, 2, "mixed")
    assert ex.summary.startswith("ZeRO-2, N=64: ")
    assert f"= {m.total / GIB:.2f} GiB per rank" in ex.summary
    fits = largest_model_that_fits(80.0 * GIB, 64, 2, "mixed")
    assert f"{fits / 1e9:.2f} B parameters" in ex.summary
    ax = ex.figure.axes[0]
    assert [ln.get_xdata()[0] for ln in ax.lines if ln.get_linestyle() == ":"] == [64]
    ex.stage.value = 3
    assert ex.summary.startswith("ZeRO-3, N=64: ")
    ex.world.value = 8
    assert "N=8" in ex.summary
    assert [ln.get_xdata()[0] for ln in ex.figure.axes[0].lines
            if ln.get_linestyle() == ":"] == [8]
    ex.precision.value = "fp32"
    total = zero_memory(int(7.5e9), 8, 3, "fp32").total / GIB
    assert f"= {total:.2f} GiB per rank" in ex.summary


# ---- what the figures draw ------------------------------------------------------------------

import pytest  # noqa: E402

from distlab.viz.layout_check import layout_problems  # noqa: E402
from distlab.viz.zero import memory_figure  # noqa: E402

SMALL = 263_168   # the notebook's measured MLP (4 x Linear(256))


def _measured_rows(params: int) -> list[dict]:
    return [{"world_size": n, "stage": s,
             "measured": {"total": zero_memory(params, n, s, "fp32").total}}
            for n in (2, 3, 4) for s in (0, 1, 2)]


def _labelled_ticks(axis) -> list[str]:
    """The tick labels a reader sees on ``axis`` (major and minor, inside the view)."""
    lo, hi = sorted(axis.get_view_interval())
    ticks = [*axis.get_major_ticks(), *axis.get_minor_ticks()]
    return [t.label1.get_text() for t in ticks
            if t.label1.get_visible() and t.label1.get_text().strip()
            and lo * (1 - 1e-9) <= t.get_loc() <= hi * (1 + 1e-9)]


def _unit(ax) -> str:
    label = ax.get_ylabel()
    assert label.endswith(")") and "(" in label, label
    return label[label.rindex("(") + 1:-1]


@pytest.mark.parametrize(("params", "unit"), [(SMALL, "MiB"), (int(7.5e9), "GiB")])
def test_memory_axis_uses_the_unit_that_fits_and_plain_ticks(params, unit) -> None:
    """A 263 k-parameter model's states (1 to 4 MiB) read in MiB, a 7.5 B one's in GiB: every
    labelled tick a plain number between 0.1 and 1000 of that unit, never 4x10^-3."""
    fig = memory_figure(params, [1, 2, 3, 4, 8, 16], "fp32", stages=(0, 1, 2),
                        measured=_measured_rows(params))
    ax = fig.axes[0]
    fig.draw_without_rendering()
    assert _unit(ax) == unit
    labels = _labelled_ticks(ax.yaxis)
    assert len(labels) >= 2, labels
    assert all("10^" not in t and "$" not in t and "e" not in t for t in labels), labels
    assert all(0.1 <= float(t) <= 1000 for t in labels), labels
    scale = {"MiB": 2**20, "GiB": 2**30}[unit]
    ddp = next(ln for ln in ax.lines if ln.get_label() == "DDP (model)")
    assert ddp.get_ydata()[0] == pytest.approx(zero_memory(params, 1, 0, "fp32").total / scale)
    measured = [ln for ln in ax.lines if ln.get_label().endswith("measured")]
    assert all(0.1 <= y <= 1000 for ln in measured for y in ln.get_ydata())
    assert _labelled_ticks(ax.xaxis)[:3] == ["1", "2", "4"]
    assert layout_problems(fig) == []


def test_the_explorer_marks_the_chosen_stage_in_the_figure() -> None:
    """Moving the stage slider changes the picture, not only the text: the chosen stage's line
    is the thick one, and a dot at the chosen world size says its bytes per rank (legend)."""
    ex = ZeroExplorer(params_b=7.5, world_size=64, stage=2, gpu_gib=80.0)
    png_before = ex.png
    for stage in (2, 3, 0):
        ex.stage.value = stage
        ax = ex.figure.axes[0]
        name = {0: "DDP", 2: "ZeRO-2", 3: "ZeRO-3"}[stage]
        thickest = max(ax.lines, key=lambda ln: ln.get_linewidth())
        assert thickest.get_label() == f"{name} (model), chosen"
        assert all(ln.get_alpha() < 1 for ln in ax.lines
                   if ln.get_label().endswith("(model)")), "the other stages are faded"
        total = zero_memory(int(7.5e9), 64, stage, "mixed").total / GIB
        assert _unit(ax) == "GiB"
        dots = [ln for ln in ax.lines if ln.get_label().startswith(f"{name} at N=64")]
        assert len(dots) == 1 and list(dots[0].get_xdata()) == [64]
        assert dots[0].get_ydata()[0] == pytest.approx(total)
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert f"{name} at N=64: {total:.3g} GiB per rank" in legend
        assert layout_problems(ex.figure) == []
    assert ex.png != png_before


def test_the_gpu_memory_line_is_labelled() -> None:
    ex = ZeroExplorer(params_b=7.5, world_size=64, stage=2, gpu_gib=80.0)
    ax = ex.figure.axes[0]
    assert _unit(ax) == "GiB"
    dashed = [ln for ln in ax.lines if ln.get_linestyle() == "--"]
    assert len(dashed) == 1 and set(dashed[0].get_ydata()) == {80.0}
    labels = [t for t in ax.texts if t.get_text() == "80 GiB per GPU"]
    assert len(labels) == 1 and labels[0].get_position()[1] == 80.0


@pytest.mark.parametrize("params_b", [0.1, 7.5, 1000.0])
def test_explorer_figures_have_no_colliding_texts(params_b) -> None:
    """Every corner of the sliders: the chosen stage's note, the GPU line's label, the legend
    and the ticks keep their own room."""
    for n in (1, 8, 64, 1024):
        sizes = sorted({1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, n})
        for stage in range(4):
            fig = memory_figure(int(params_b * 1e9), sizes, "mixed", chosen=(stage, n),
                                limit_bytes=80 * GIB, limit_label="80 GiB per GPU")
            assert layout_problems(fig) == [], (params_b, n, stage)
