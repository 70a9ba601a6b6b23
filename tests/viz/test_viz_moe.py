"""The MoE load figure: what it draws is the load it was given, and it draws clean."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402

from distlab.moe import MoE, MoEConfig, expert_load  # noqa: E402
from distlab.viz.figure import DisplayFigure  # noqa: E402
from distlab.viz.layout_check import JUPYTERLAB_WIDTH_PX, layout_problems  # noqa: E402
from distlab.viz.moe import load_figure, load_summary  # noqa: E402


def _routed_load(experts: int, ranks: int):
    torch.manual_seed(0)
    moe = MoE(MoEConfig(dim=16, hidden=32, num_experts=experts, top_k=2, init_std=0.5))
    moe(torch.randn(4, 32, 16))
    return expert_load(moe.last_routing, ranks, dim=16, hidden=32)


@pytest.mark.parametrize("experts,ranks", [(8, 2), (16, 4), (64, 8)])
def test_bars_are_the_load_and_the_figure_is_clean(experts, ranks):
    load = _routed_load(experts, ranks)
    fig = load_figure(load)
    assert isinstance(fig, DisplayFigure)
    assert layout_problems(fig) == []
    assert fig.get_tightbbox().width * fig.dpi <= JUPYTERLAB_WIDTH_PX
    ax_e, ax_r = fig.axes
    assert [int(p.get_height()) for p in ax_e.patches] == list(load.tokens_per_expert)
    assert [int(p.get_height()) for p in ax_r.patches] == list(load.tokens_per_rank)
    # experts take their rank's colour; only the slowest rank is outlined
    per = experts // ranks
    for e, bar in enumerate(ax_e.patches):
        assert bar.get_facecolor() == ax_r.patches[e // per].get_facecolor()
    outlined = [r for r, p in enumerate(ax_r.patches) if p.get_linewidth() and
                p.get_edgecolor()[3] > 0]
    assert outlined == [load.slowest_rank]
    assert ax_r.get_title() == f"per rank: max/mean {load.rank_imbalance:.2f}"
    assert fig._repr_png_().startswith(b"\x89PNG")     # IPython shows it as one image


def test_summary_and_bad_input():
    load = expert_load([6, 0, 1, 1], 2, dim=8, hidden=16)
    assert load_summary(load) == ("slowest: rank 0, 1.50x the mean rank's expert FLOPs; ranks "
                                  "wait 33% of expert time (4.61 kFLOP forward on the slowest)")
    assert "kFLOP" not in load_summary(expert_load([6, 0, 1, 1], 2))
    with pytest.raises(TypeError, match="load must be an ExpertLoad"):
        load_figure([6, 0, 1, 1])
    with pytest.raises(TypeError, match="title must be a str"):
        load_figure(load, title=3)


def test_alltoall_figure_draws_the_priced_bandwidths():
    from distlab.nccl.alltoall import alltoall_times, fabric
    from distlab.viz.moe import alltoall_figure

    sizes = [2**k for k in range(10, 28, 2)]
    box = alltoall_times(fabric("h100_sxm8", 8), sizes)
    two = alltoall_times(fabric("h100_sxm8", 16, nodes=2, nic_gbps=50), sizes)
    fig = alltoall_figure({"one box": box, "two boxes": two})
    assert layout_problems(fig) == []
    assert fig.get_tightbbox().width * fig.dpi <= JUPYTERLAB_WIDTH_PX
    ax = fig.axes[0]
    lines = {ln.get_label(): ln for ln in ax.lines}
    assert list(lines["one box"].get_ydata()) == [r.busbw_gbps for r in box]
    assert list(lines["two boxes"].get_xdata()) == sizes
    with pytest.raises(ValueError, match="series"):
        alltoall_figure({})
    with pytest.raises(ValueError, match="0 bytes"):
        alltoall_figure({"x": alltoall_times(fabric("h100_sxm8", 8), [0])})
    with pytest.raises(TypeError, match="AlltoallRun"):
        alltoall_figure({"x": [1, 2]})


def test_load_explorer_redraws_the_load_at_its_sliders():
    from distlab.moe import random_routing
    from distlab.viz.moe import LoadExplorer

    ex = LoadExplorer(16, ep_size=4, top_k=2, tokens=256, dim=8, hidden=16)
    want = expert_load(random_routing(16, 2, 256, dim=8), 4, dim=8, hidden=16)
    assert ex.load == want and ex.summary == f"ep=4, top-2: {load_summary(want)}"
    assert list(ex.ep.options) == [1, 2, 4, 8, 16]
    png = ex.png
    ex.ep.value = 16
    assert ex.load.ep_size == 16 and ex.png != png and ex.summary.startswith("ep=16, top-2")
    ex.top_k.value = 1
    assert ex.load.tokens == 256 and ex.summary.startswith("ep=16, top-1")
    with pytest.raises(ValueError, match="ep_size"):
        LoadExplorer(16, ep_size=3)


def test_layer_step_figure_stacks_the_traced_parts_beside_the_prediction():
    from distlab.moe.step_trace import measured_layer_step_trace
    from distlab.viz.moe import layer_step_figure

    trace = measured_layer_step_trace()
    fig = layer_step_figure(trace, {"experts forward": 2e-3, "experts backward": 4e-3})
    assert layout_problems(fig) == []
    assert fig.get_tightbbox().width * fig.dpi <= JUPYTERLAB_WIDTH_PX
    (ax,) = fig.axes
    # per traced part a solid bar (kernels) and a hatched one (idle), then the two predicted
    widths = [p.get_width() for p in ax.patches]
    assert len(widths) == 2 * len(trace.parts) + 2
    assert sum(widths[:-2]) == pytest.approx(sum(p.span_s for p in trace.parts) * 1e3)
    assert widths[-2:] == pytest.approx([2.0, 4.0])
    with pytest.raises(ValueError):
        layer_step_figure(trace, {})
    with pytest.raises(TypeError):
        layer_step_figure("trace", {"x": 1.0})


def test_one_rank_is_ticked_on_whole_numbers_and_named_in_the_singular():
    """At ep=1 the ranks panel had ticks at -0.4, -0.2 ... 0.4 and the title said "1 ranks"."""
    fig = load_figure(_routed_load(64, 1))
    fig.canvas.draw()
    ax_e, ax_r = fig.axes
    assert list(ax_r.get_xticks()) == [0]
    assert all(float(t).is_integer() for t in ax_e.get_xticks())
    assert "64 experts over 1 rank," in fig._suptitle.get_text()
    assert layout_problems(fig) == []
