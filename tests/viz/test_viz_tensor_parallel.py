"""Tensor-parallel figures and the explorer, driven without a browser."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from distlab.tensor_parallel.cost import price_layer  # noqa: E402
from distlab.tensor_parallel.demo import run_mlp_tensor_parallel  # noqa: E402
from distlab.viz.figure import DisplayFigure  # noqa: E402
from distlab.viz.layout_check import JUPYTERLAB_WIDTH_PX, layout_problems  # noqa: E402
from distlab.viz.tensor_parallel import (  # noqa: E402
    TensorParallelExplorer,
    block_figure,
    gpt_shape,
    price_figure,
    trace_figure,
)

pytestmark = pytest.mark.timeout(180)


def _width_px(fig) -> float:
    return fig.get_tightbbox().width * fig.dpi


@pytest.fixture(scope="module")
def run():
    return run_mlp_tensor_parallel(2, hidden=16, seq_len=4, micro_batch=2)


def test_block_and_trace_figures_draw_clean(run) -> None:
    for fig in (block_figure(run), trace_figure(run)):
        assert isinstance(fig, DisplayFigure)
        assert layout_problems(fig) == []
        assert _width_px(fig) <= JUPYTERLAB_WIDTH_PX
    texts = [t.get_text() for ax in block_figure(run).axes for t in ax.texts]
    assert "32x16" in texts and "16x32" in texts   # fc1's and fc2's shards, from the run
    assert "> all_reduce" in texts and "< reduce_scatter" in texts
    with pytest.raises(TypeError, match="TPRun"):
        block_figure("run")


def test_block_figure_text_is_readable_and_names_each_operator_once(run) -> None:
    """Every text of the block diagram is at least 7.5 pt (10 px at 100 dpi; it was 6 pt);
    the operators are f and f-bar without sequence parallelism, g and g-bar with it (one name,
    one operator)."""
    fig = block_figure(run)
    sizes = [t.get_fontsize() for ax in fig.axes for t in ax.texts]
    assert min(sizes) >= 7.5
    tp, sp = ([t.get_text() for t in ax.texts] for ax in fig.axes)
    assert "$f$" in tp and r"$\bar{f}$" in tp and "$g$" not in tp
    assert "$g$" in sp and r"$\bar{g}$" in sp and "$f$" not in sp


def test_price_figure_lines_are_price_layer(run) -> None:
    fig = price_figure([4096, 12288], 8, "h100_sxm8", ["ib_ndr400x8", "tcp100"])
    assert layout_problems(fig) == [] and _width_px(fig) <= JUPYTERLAB_WIDTH_PX
    (ax,) = fig.axes
    assert len(ax.lines) == 3
    one = ax.lines[0].get_ydata()[1]
    assert abs(one - price_layer(gpt_shape(12288), 8, box="h100_sxm8").seconds * 1e3) < 1e-9
    with pytest.raises(ValueError, match="networks"):
        price_figure([4096], 8, "h100_sxm8", ["nowhere"])


def test_price_figure_labels_1_2_5_of_each_decade() -> None:
    """The log axis names more than its powers of ten: 0.5, 1, 2, 5, 10, 20 in plain numbers."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = price_figure([4096, 8192, 12288, 16384], 8, "h100_sxm8",
                       ["ib_ndr400x8", "efa400", "tcp100"])
    FigureCanvasAgg(fig).draw()
    (ax,) = fig.axes
    low, high = ax.get_ylim()
    shown = [t.get_text() for t in ax.get_yticklabels()
             if t.get_text() and low <= t.get_position()[1] <= high]
    assert shown == ["0.5", "1", "2", "5", "10", "20"], shown


def test_explorer_reacts_and_says_why_not() -> None:
    ex = TensorParallelExplorer(8, hidden=12288)
    assert ex.summary.startswith("collectives 1.08 ms per layer") and "552 MiB" in ex.summary
    assert layout_problems(ex.figure) == [] and ex.png
    png = ex.png
    ex.sequence_parallel.value = True
    assert "342 MiB" in ex.summary and "(without SP 552 MiB)" in ex.summary
    assert len(ex.price.calls) == 8 and ex.png != png
    ex.where.value = "tcp100"
    assert "over tcp100" in ex.price.where
    ex.where.value = "one node"
    ex.tp.value = 16
    assert ex.price is None and "at most 8 GPUs" in ex.summary
