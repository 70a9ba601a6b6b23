"""Figures and widget explorers, driven without a browser: set .value, check state and figure."""

from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")

import pytest

from distlab.loading import RunResult, run_pipeline
from distlab.loading.bottleneck import plan_for_stages, simulate_pipeline
from distlab.loading.part_loader_model import part_load_times, parts_idle_fraction
from distlab.timeline import Timeline
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
    assert "no worker start-up" in ex.summary      # sync starts no workers
    assert len(_bars(ex.figure.axes[0])) == len(res.timeline.spans) == 8 * 3
    path = ex.write_trace()
    assert path is not None and json.loads(path.read_text())["traceEvents"]
    ex.items.value = 4                           # settings not measured: no measurement
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


def _processes_run(startup_s: float = 25.0) -> RunResult:
    """A measured run of 4 worker processes as the explorer draws one: ``startup_s`` of worker
    start-up, then 8 items read (10 ms) and decoded (10 ms) on worker ``item % 4`` and
    computed (10 ms) in turn; the lanes first appear out of order (worker2, worker0, compute,
    worker1, worker3), as results arriving from processes record them."""
    tl = Timeline()
    t0 = 5e6
    tl.record("startup", "startup", "rank0/startup", t0, startup_s * 1e6)
    start = t0 + startup_s * 1e6
    for k in (2, 0):
        for i in (k, k + 4):
            s = start + 1e3 + (i // 4) * 20e3
            tl.record("read", "io", f"rank0/worker{k}", s, 10e3, {"item": i})
            tl.record("decode", "cpu", f"rank0/worker{k}", s + 10e3, 10e3, {"item": i})
    for i in range(8):
        tl.record("compute", "compute", "rank0/compute", start + 25e3 + i * 10e3, 10e3)
    for k in (1, 3):
        for i in (k, k + 4):
            s = start + 1e3 + (i // 4) * 20e3
            tl.record("read", "io", f"rank0/worker{k}", s, 10e3, {"item": i})
            tl.record("decode", "cpu", f"rank0/worker{k}", s + 10e3, 10e3, {"item": i})
    end = start + 25e3 + 80e3
    return RunResult("processes", tl, 8, start, end, "rank0/compute", None,
                     {"executor": "processes", "workers": 4}, startup_s)


def _processes_sim() -> Timeline:
    plan = plan_for_stages("processes", explorer_stages(10, 10, 10), workers=4, queue_depth=2)
    return simulate_pipeline(plan, 8)


def _lane_names(ax) -> list[str]:
    return [t.get_text().rsplit("/", 1)[-1] for t in ax.get_yticklabels()]


def _check_steady_axis(ax, steady_ms: float) -> None:
    """The panel's time axis starts at the steady pipeline's start (0) and spans it, with no
    room for start-up: nothing drawn (bars, idle shading) lies before 0."""
    lo, hi = ax.get_xlim()
    assert lo >= 0.0
    assert steady_ms <= hi <= 1.1 * steady_ms, (hi, steady_ms)
    assert all(b[0] >= 0.0 for b in _bars(ax))
    shaded = [p for p in ax.patches if p.get_facecolor()[0] == 1.0 and p.get_alpha()]
    assert shaded and all(p.get_x() >= 0.0 for p in shaded)


def _legend_colours(ax) -> set[tuple]:
    from matplotlib.colors import to_rgba

    return {to_rgba(h.get_facecolor(), 1.0) for h in ax.get_legend().legend_handles}


def _check_legend_names_every_colour(ax) -> None:
    """Every bar colour drawn has a legend entry, and every entry but the idle shading is a
    colour drawn; the shading lies behind the bars, so a bar shows its own colour, not a blend
    of it with the shading's red that no entry names."""
    from matplotlib.collections import PolyCollection
    from matplotlib.colors import to_rgba

    drawn = {to_rgba(b[2], 1.0) for b in _bars(ax)}
    legend = _legend_colours(ax)
    assert drawn <= legend, f"bar colours {drawn - legend} have no legend entry"
    assert legend - drawn == {to_rgba("red")}, "a legend entry names nothing drawn"
    shaded = [p for p in ax.patches if p.get_facecolor()[0] == 1.0 and p.get_alpha()]
    bars = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert max(p.get_zorder() for p in shaded) < min(c.get_zorder() for c in bars)


def test_start_up_is_never_on_the_steady_time_axis() -> None:
    """With 25 s of worker start-up the panels span the 105 ms steady pipeline from 0, not
    25 s of shaded idle with the pipeline a sliver at the right edge."""
    r, sim = _processes_run(), _processes_sim()
    steady_ms = max(r.wall_s, sim.wall_us() * 1e-6) * 1e3
    fig = compare_loading_gantt(r.timeline, sim, measured_origin_us=r.start_us,
                                measured_consumer=r.consumer_lane,
                                simulated_consumer="sim/compute", title="processes")
    for ax in fig.axes[:2]:
        _check_steady_axis(ax, steady_ms)
    fig = runs_gantt([r])
    _check_steady_axis(fig.axes[0], r.wall_s * 1e3)
    assert "worker start-up 25000 ms, not drawn" in fig.axes[0].get_title(loc="left")


def test_measured_and_simulated_panels_order_their_lanes_alike() -> None:
    r, sim = _processes_run(), _processes_sim()
    fig = compare_loading_gantt(r.timeline, sim, measured_origin_us=r.start_us,
                                measured_consumer=r.consumer_lane,
                                simulated_consumer="sim/compute")
    top, bottom = fig.axes[0], fig.axes[1]
    expect = ["worker0", "worker1", "worker2", "worker3", "compute"]
    assert _lane_names(top) == _lane_names(bottom) == expect
    # threads: one lane per stage, in pipeline order, in both panels
    stages = explorer_stages(2, 1, 1)
    run = run_pipeline(stages, 4, "threads")
    fig = compare_loading_gantt(run.timeline, simulate_pipeline(
        plan_for_stages("threads", stages), 4), measured_origin_us=run.start_us,
        measured_consumer=run.consumer_lane, simulated_consumer="sim/compute")
    assert _lane_names(fig.axes[0]) == _lane_names(fig.axes[1]) == ["read", "decode", "compute"]


def test_every_colour_drawn_has_a_legend_entry() -> None:
    r, sim = _processes_run(), _processes_sim()
    fig = compare_loading_gantt(r.timeline, sim, measured_origin_us=r.start_us,
                                measured_consumer=r.consumer_lane,
                                simulated_consumer="sim/compute")
    for ax in fig.axes[:2]:
        _check_legend_names_every_colour(ax)
    _check_legend_names_every_colour(runs_gantt([r]).axes[0])


def test_the_explorer_draws_a_processes_run_without_its_start_up(tmp_path) -> None:
    """The explorer's measured panel of a 4-worker ``processes`` run: the steady pipeline from
    0, lanes as the model's, start-up given in the title and summary as the one figure."""
    ex = LoadingExplorer(items=8, read_ms=10, decode_ms=10, compute_ms=10, workers=4,
                         executor="processes", trace_dir=str(tmp_path))
    r = _processes_run()
    ex.measurements[ex.measurement_key()] = r     # as "run measured" would leave it
    ex.update()
    assert ex.result is r
    top, bottom = ex.figure.axes[0], ex.figure.axes[1]
    steady_ms = max(r.wall_s, ex.sim.wall_us() * 1e-6) * 1e3
    for ax in (top, bottom):
        _check_steady_axis(ax, steady_ms)
        _check_legend_names_every_colour(ax)
    assert _lane_names(top) == _lane_names(bottom)
    assert "worker start-up 25000 ms, not drawn" in top.get_title(loc="left")
    assert "worker start-up 25000 ms, not drawn" in ex.summary


def test_the_explorer_keeps_its_measurements_by_the_settings_they_depend_on(tmp_path) -> None:
    ex = LoadingExplorer(items=4, read_ms=0.5, decode_ms=0.5, compute_ms=0.5,
                         trace_dir=str(tmp_path), measure_now=True)
    measured = ex.result
    assert measured is not None and "measured" in ex.summary   # it opens with its measurement
    ex.decode_ms.value = 1.0                  # another setting: not measured
    assert ex.result is None and "measured" not in ex.summary
    ex.decode_ms.value = 0.5                  # back: the measurement of these settings again
    assert ex.result is measured and "measured" in ex.summary
    ex.workers.value = 3                      # threads run no workers: still the same run
    assert ex.result is measured
    ex.executor.value = "processes"           # the workers matter here: not measured
    assert ex.result is None
