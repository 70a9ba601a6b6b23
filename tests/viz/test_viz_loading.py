"""Figures and widget explorers, driven without a browser: set .value, check state and figure."""

from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")

import pytest

from distlab.loading import run_pipeline
from distlab.loading.bottleneck import plan_for_stages, simulate_pipeline
from distlab.loading.part_loader_model import part_load_times, parts_idle_fraction
from distlab.viz.loading import (
    COLORS,
    LoadingExplorer,
    PartsExplorer,
    compare_loading_gantt,
    explorer_stages,
    idle_vs_queue_figure,
    runs_gantt,
    steady_lanes,
)

pytestmark = pytest.mark.timeout(120)


def _png(fig) -> bytes:
    import io
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def test_pipeline_explorer_follows_sliders_and_measures(tmp_path) -> None:
    ex = LoadingExplorer(items=8, read_ms=1, decode_ms=1, compute_ms=1, trace_dir=str(tmp_path))
    first_fig, first_summary = ex.figure, ex.summary
    assert "threads: bound" in first_summary
    before = _png(first_fig)
    ex.read_ms.value = 6.0                      # the slowest stage is now read: 6 ms per item
    assert ex.figure is not first_fig and _png(ex.figure) != before
    assert max(st.cost_s for st in ex.plan) == pytest.approx(0.006)
    assert "bound 50.0 ms" in ex.summary        # first item 6 + 1 + 1, then 7 more * 6 ms
    ex.executor.value = "sync"
    assert [st.name for st in ex.plan] == ["read+decode+compute"]
    res = ex.measure()
    assert ex.result is res and res.n_items == 8 and "measured" in ex.summary
    assert "start-up" in ex.summary                # start-up is always accounted for in words
    if hasattr(res, "startup_s"):
        assert "start-up 0.0 ms" in ex.summary     # sync starts no workers: start-up is 0
    assert len(_bars(ex.figure.axes[0])) == len(res.timeline.spans) == 8 * 3
    path = ex.write_trace()
    assert path is not None and json.loads(path.read_text())["traceEvents"]
    ex.items.value = 4                           # a change invalidates the measurement
    assert ex.result is None and "measured" not in ex.summary
    ex2 = LoadingExplorer(items=3, read_ms=0.5, decode_ms=0.5, compute_ms=0.5, measure_now=True)
    assert ex2.result is not None and ex2.result.n_items == 3


def test_parts_explorer_queue_slider_changes_prediction() -> None:
    ex = PartsExplorer(n_parts=12, queue_size=1, load_ms=40, jitter=1.0, train_ms=40)
    idle1, fig1 = ex.idle_async, _png(ex.figure)
    assert ex.idle_sync > ex.idle_async
    ex.queue_size.value = 4
    assert ex.idle_async <= idle1 and _png(ex.figure) != fig1
    ex.load_ms.value = 1.0                        # loads far faster than training: no idle
    assert ex.idle_async < 0.05 and "trainer idle" in ex.summary


def _bars(ax) -> list[tuple[float, float, tuple]]:
    """Every Gantt bar drawn on ``ax``: (start ms, width ms, RGBA face colour)."""
    from matplotlib.collections import PolyCollection

    out = []
    for coll in ax.collections:
        if not isinstance(coll, PolyCollection):
            continue
        faces = coll.get_facecolors()
        for i, path in enumerate(coll.get_paths()):
            xs = path.vertices[:, 0]
            out.append((float(xs.min()), float(xs.max() - xs.min()),
                        tuple(faces[i % len(faces)])))
    return out


def test_runs_gantt_draws_one_bar_per_span_in_category_colours() -> None:
    from matplotlib.colors import to_rgba

    stages = explorer_stages(2, 1, 1)
    r1 = run_pipeline(stages, 4, "sync")
    r2 = run_pipeline(stages, 4, "threads")
    fig = runs_gantt([r1, r2])
    assert len(fig.axes) >= 2
    for ax, r in zip(fig.axes, (r1, r2), strict=False):
        assert ax.get_title(loc="left").startswith(r.executor)
        assert f"{r.wall_s * 1e3:.0f} ms" in ax.get_title(loc="left")
        bars = _bars(ax)
        assert len(bars) == len(r.timeline.spans) == 4 * 3
        starts = sorted(round(b[0], 6) for b in bars)
        expect = sorted(round((s.start_us - r.start_us) / 1e3, 6) for s in r.timeline.spans)
        assert starts == pytest.approx(expect, abs=1e-6)
        colours = {b[2] for b in bars}
        assert colours == {to_rgba(COLORS[c]) for c in ("io", "cpu", "compute")}
        lanes = [t.get_text() for t in ax.get_yticklabels()]
        assert lanes == steady_lanes(r.timeline)


def test_compare_gantt_draws_measured_and_simulated_spans() -> None:
    stages = explorer_stages(2, 1, 1)
    r = run_pipeline(stages, 4, "threads")
    sim = simulate_pipeline(plan_for_stages("threads", stages), 4)
    fig = compare_loading_gantt(r.timeline, sim, measured_origin_us=r.start_us,
                        measured_consumer=r.consumer_lane, simulated_consumer="sim/compute")
    top, bottom = fig.axes[0], fig.axes[1]
    assert [a.get_title(loc="left") for a in (top, bottom)] == ["measured", "simulated (model)"]
    assert len(_bars(top)) == len(r.timeline.spans)
    assert len(_bars(bottom)) == len(sim.spans)
    # the simulated consumer idles while the first item passes read and decode: 3 ms shaded
    shaded = [p for p in bottom.patches if p.get_facecolor()[0] == 1.0 and p.get_alpha()]
    assert shaded and min(p.get_x() for p in shaded) == pytest.approx(0.0)


def test_steady_lanes_leave_startup_out() -> None:
    from distlab.timeline import Timeline

    tl = Timeline()
    tl.record("startup", "startup", "rank0/startup", 0, 1000)
    tl.record("a", "cpu", "rank0/a", 1000, 10)
    assert steady_lanes(tl) == ["rank0/a"]


def test_idle_vs_queue_figure_plots_the_model_and_measured_points() -> None:
    loads = part_load_times(8, 0.01, 1.0)
    fig3 = idle_vs_queue_figure(8, loads, 0.01, queue_sizes=(1, 2, 4), measured={2: 0.1})
    ax = fig3.axes[0]
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    model = lines["async (model)"]
    assert list(model.get_xdata()) == [1, 2, 4]
    assert list(model.get_ydata()) == pytest.approx(
        [parts_idle_fraction(8, loads, 0.01, queue_size=q) for q in (1, 2, 4)])
    assert list(lines["sync (model)"].get_ydata()) == pytest.approx(
        [parts_idle_fraction(8, loads, 0.01, mode="sync")] * 2)
    assert list(lines["async (measured)"].get_xdata()) == [2]
    assert list(lines["async (measured)"].get_ydata()) == [0.1]
