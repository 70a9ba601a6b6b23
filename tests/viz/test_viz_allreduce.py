"""Plan picture, cost curves and the widget explorers, driven without a browser."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.colors import to_hex
from matplotlib.lines import Line2D

from distlab.collectives import (
    ALGORITHMS,
    PRESETS,
    build,
    contributors,
    crossovers,
    holdings,
    predict_sizes,
    winners,
)
from distlab.viz import allreduce as V
from distlab.viz.layout_check import colours_by_label, layout_problems


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
@pytest.mark.parametrize("p", [1, 2, 3, 6, 8, 64])
def test_holdings_end_with_everything_everywhere(name: str, p: int) -> None:
    s = build(name, p, 3 * p + 1)
    h = holdings(s)
    assert h.shape == (len(s.steps) + 1, p, 3 * p + 1)
    assert (contributors(h[0]) == 1).all()
    assert (contributors(h[-1]) == p).all()


def test_ring_holdings_after_reduce_scatter() -> None:
    h = contributors(holdings(build("ring", 4, 4)))
    after_rs = h[3]
    assert sorted(after_rs.max(axis=1).tolist()) == [4, 4, 4, 4]
    assert [int(np.argmax(row)) for row in after_rs] == [1, 2, 3, 0], "rank i owns chunk i+1"


def test_winners_and_crossovers() -> None:
    times = {"a": [1.0, 2.0, 5.0], "b": [3.0, 2.0, 1.0]}
    assert winners(times) == ["a", "a", "b"]
    (c,) = crossovers([10, 20, 30], times)
    assert (c.x_before, c.x_after, c.before, c.after) == (20, 30, "a", "b")
    nv = PRESETS["nvlink4_h100"]
    t = predict_sizes(["recursive_doubling", "ring"], 8, [1024, 1 << 30], nv.alpha, nv.beta,
                      nv.gamma)
    assert winners(t) == ["recursive_doubling", "ring"], "latency vs bandwidth regimes"


def test_plan_figure_draws_arrows_per_transfer() -> None:
    s = build("ring", 4, 8)
    fig = V.plan_figure(s, step=1)
    ax = fig.axes[0]
    assert len(ax.patches) == len(s.steps[0].transfers)
    assert "step 1/6" in ax.get_title()
    assert "step 3/6" in V.plan_figure(s, step=3).axes[0].get_title()
    assert "step 6/6" in V.plan_figure(s).axes[0].get_title()
    start = V.plan_figure(s, step=0)
    assert "start" in start.axes[0].get_title() and not start.axes[0].patches
    assert "nothing to do" in V.plan_figure(build("ring", 1, 4)).axes[0].get_title()


def test_plan_explorer_redraws_on_every_control() -> None:
    e = V.PlanExplorer("ring", world_size=4)
    first = e.png
    assert first and "ring on 4 ranks: 6 steps" in e.summary
    assert (e.step.min, e.step.max) == (0, 6)
    e.step.value = 3
    assert e.png != first
    # the slider, the picture's title and the summary count the same steps
    assert "step 3/6" in e.figure.axes[0].get_title() and "after step 3/6" in e.summary
    e.world_size.value = 7
    assert e.schedule is not None and e.schedule.world_size == 7
    assert e.step.max == 2 * 6 and e.step.value == 3
    e.algorithm.value = "recursive_doubling"
    assert e.step.max == len(e.schedule.steps) == 4  # fold in, 2 exchanges, fold out
    assert e.step.value == 3
    e.world_size.value = 1
    assert e.step.max == 0 and e.step.value == 0 and "0 steps" in e.summary


def test_cost_explorer_follows_preset_and_world_size() -> None:
    c = V.CostExplorer(dict(PRESETS), "nvlink4_h100", world_size=8)
    before = c.png
    assert "H100 datasheet" in c.summary
    c.preset.value = "ethernet_100g"
    assert c.png != before and "802.3" in c.summary
    mid = c.png
    c.world_size.value = 12
    assert c.png != mid
    assert "MODEL" in c.figure._suptitle.get_text()


def _drawn(line: Line2D) -> tuple[str, str, str, list[tuple[float, float]]]:
    """A line as (legend label, marker, line style, points): what the reader sees of it; ""
    for a line kept out of the legend."""
    pts = [(float(x), float(y)) for x, y in zip(line.get_xdata(), line.get_ydata(), strict=False)]
    label = "" if line.get_label().startswith("_") else line.get_label()
    return label, line.get_marker(), line.get_linestyle(), pts


def test_measured_vs_model_figure() -> None:
    """Per algorithm, in row order: measured time_us as dots labelled '<algo> measured', then
    the model's predicted_us as a solid line '<algo> model' in the same colour; an algorithm
    without a prediction at every size gets its measured times joined by a dashed line."""
    rows = [{"algorithm": a, "nbytes": s, "time_us": t * s,
             "predicted_us": None if a == "builtin" else 9.0 * s}
            for a, t in (("ring", 10.0), ("builtin", 7.0), ("tree", 5.0)) for s in (1, 2, 4)]
    rows[-1]["predicted_us"] = None                       # tree: one size without a model
    ax = V.measured_vs_model_figure(rows).axes[0]
    sizes = [1.0, 2.0, 4.0]

    def pts(ys: list[float]) -> list[tuple[float, float]]:
        return list(zip(sizes, ys, strict=False))
    assert [_drawn(ln) for ln in ax.lines] == [
        ("ring measured", "o", "None", pts([10.0, 20.0, 40.0])),
        ("ring model", "None", "-", pts([9.0, 18.0, 36.0])),
        ("builtin measured", "o", "None", pts([7.0, 14.0, 28.0])),
        ("builtin measured, joined", "None", "--", pts([7.0, 14.0, 28.0])),
        ("tree measured", "o", "None", pts([5.0, 10.0, 20.0])),
        ("tree measured, joined", "None", "--", pts([5.0, 10.0, 20.0]))]
    colors = [ln.get_color() for ln in ax.lines]
    assert colors[:4] == [V.ALGO_COLORS["ring"]] * 2 + [V.ALGO_COLORS["builtin"]] * 2
    assert colors[4:] == [V.ALGO_COLORS["tree"]] * 2 and len(set(colors)) == 3
    assert ax.get_xscale() == ax.get_yscale() == "log"
    assert "median" in ax.get_ylabel(), "rows without their mean: the dots are the medians"


def test_measured_vs_model_dots_are_the_statistic_the_model_is_judged_by() -> None:
    """With the mean kept (the benchmark's default statistic) the dots are the means, and a
    builtin the model prices (gloo) gets its model line like any algorithm."""
    rows = [{"algorithm": a, "nbytes": s, "time_us": 10.0 * s, "mean_us": 12.0 * s,
             "predicted_us": 11.0 * s} for a in ("ring", "builtin") for s in (1, 2)]
    ax = V.measured_vs_model_figure(rows).axes[0]
    assert [(ln.get_label(), list(ln.get_ydata())) for ln in ax.lines] == [
        ("ring measured", [12.0, 24.0]), ("ring model", [11.0, 22.0]),
        ("builtin measured", [12.0, 24.0]), ("builtin model", [11.0, 22.0])]
    assert "mean" in ax.get_ylabel()
    median = V.measured_vs_model_figure(rows, statistic="median").axes[0]
    assert list(median.lines[0].get_ydata()) == [10.0, 20.0]
    with pytest.raises(ValueError, match="statistic"):
        V.measured_vs_model_figure(rows, statistic="p90")


def test_measured_vs_model_legend_names_each_algorithm_once_in_its_one_colour() -> None:
    """What a reader matches by colour: each algorithm's dots and model line share one colour,
    and the legend has one entry per algorithm in that colour, drawn as dot and line (the model
    lines have an entry), then what dots, lines and dashes mean; no text collides."""
    algos = ["ring", "tree", "recursive_doubling", "rabenseifner", "builtin"]
    rows = [{"algorithm": a, "nbytes": s, "time_us": (i + 2.0) * s,
             "predicted_us": None if a == "builtin" else (i + 1.5) * s}
            for i, a in enumerate(algos) for s in (1 << 16, 1 << 18, 1 << 20, 1 << 22)]
    fig = V.measured_vs_model_figure(rows)
    ax = fig.axes[0]
    colours = colours_by_label(ax, algos)
    assert all(len(c) == 1 for c in colours.values()), colours
    assert len({next(iter(c)) for c in colours.values()}) == len(algos)
    for a in algos[:-1]:
        assert any(ln.get_label() == f"{a} model" and ln.get_linestyle() == "-"
                   for ln in ax.lines), f"{a}: no model line a legend can name"
    legend = ax.get_legend()
    texts = [t.get_text() for t in legend.get_texts()]
    assert texts[:len(algos)] == algos
    assert texts[len(algos):] == ["dots: measured (median of rounds)", "lines: the model",
                                  "dashed: measured, joined (no model)"]
    for a, handle in zip(algos, legend.legend_handles, strict=False):
        assert to_hex(handle.get_color()) == next(iter(colours[a]))
        assert handle.get_marker() == "o"
        assert handle.get_linestyle() == ("--" if a == "builtin" else "-")
    assert layout_problems(fig) == []


def test_algorithm_colours_are_distinct_and_never_the_legends_grey() -> None:
    """Every algorithm and the builtin a colour of its own, none the grey (C7) in which the
    legends say what dots and lines mean."""
    colours = [to_hex(c) for c in V.ALGO_COLORS.values()]
    assert set(ALGORITHMS) | {"builtin"} <= set(V.ALGO_COLORS)
    assert len(set(colours)) == len(colours)
    assert to_hex("C7") not in colours


def test_plan_figure_rejects_a_step_outside_the_plan() -> None:
    with pytest.raises(ValueError, match=r"step must be an int in \[0, 2\], got 3"):
        V.plan_figure(build("naive", 3, 6), step=3)
    with pytest.raises(ValueError, match=r"step must be an int in \[0, 2\], got -1"):
        V.plan_figure(build("naive", 3, 6), step=-1)


def test_cost_vs_world_size_names_each_winner_once(monkeypatch) -> None:
    from distlab.collectives import get_preset

    preset = get_preset("pcie4_x16")
    # The model's times are what the figure computed from the inputs the test names (one
    # prediction over 63 world sizes instead of the same one twice): the call is recorded.
    calls = []
    real = V.predict_world_sizes

    def recorded(*args, **kwargs):
        calls.append((args, kwargs, real(*args, **kwargs)))
        return calls[-1][2]

    monkeypatch.setattr(V, "predict_world_sizes", recorded)
    fig = V.cost_vs_world_size_figure(preset, nbytes=1 << 20)
    ax, strip = fig.axes
    assert not ax.texts, "no per-crossover labels stacked on the curves"
    xs = list(range(2, 65))
    [(args, kwargs, times)] = calls
    assert args == (list(ALGORITHMS), xs, 1 << 20, preset.alpha, preset.beta, preset.gamma, 4)
    assert kwargs == {"duplex": getattr(preset, "duplex", "full")}
    for line in ax.get_lines():
        assert np.array_equal(line.get_ydata(), np.asarray(times[line.get_label()]) * 1e6)
    win = winners(times)
    assert len(crossovers(xs, times)) > 5, "a noisy curve crosses the line many times"
    colors = [tuple(bar.get_facecolor()) for bar in strip.patches]
    from matplotlib.colors import to_rgba
    assert colors == [to_rgba(V.ALGO_COLORS[a]) for a in win]
    named = strip.get_xlabel().split("(")[-1].rstrip(")").split(", ")
    assert sorted(named) == sorted(set(win)), "each winner named exactly once"
