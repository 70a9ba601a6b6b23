"""Figures and widget explorers, driven without a browser: set .value, check state and figure."""

from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")

import pytest

from distlab.pipeline import run_pipeline
from distlab.pipeline.model import part_load_times, simulate
from distlab.viz.pipeline import (PartsExplorer, PipelineExplorer, compare_gantt,
                                  explorer_stages, idle_vs_queue_figure, plan_rows, runs_gantt)

pytestmark = pytest.mark.timeout(120)


def _png(fig) -> bytes:
    import io
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def test_pipeline_explorer_follows_sliders_and_measures(tmp_path) -> None:
    ex = PipelineExplorer(items=8, read_ms=1, decode_ms=1, compute_ms=1, trace_dir=str(tmp_path))
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
    path = ex.write_trace()
    assert path is not None and json.loads(path.read_text())["traceEvents"]
    ex.items.value = 4                           # a change invalidates the measurement
    assert ex.result is None and "measured" not in ex.summary
    ex2 = PipelineExplorer(items=3, read_ms=0.5, decode_ms=0.5, compute_ms=0.5, measure_now=True)
    assert ex2.result is not None and ex2.result.n_items == 3


def test_parts_explorer_queue_slider_changes_prediction() -> None:
    ex = PartsExplorer(n_parts=12, queue_size=1, load_ms=40, jitter=1.0, train_ms=40)
    idle1, fig1 = ex.idle_async, _png(ex.figure)
    assert ex.idle_sync > ex.idle_async
    ex.queue_size.value = 4
    assert ex.idle_async <= idle1 and _png(ex.figure) != fig1
    ex.load_ms.value = 1.0                        # loads far faster than training: no idle
    assert ex.idle_async < 0.05 and "trainer idle" in ex.summary


def test_static_figures() -> None:
    stages = explorer_stages(2, 1, 1)
    rows = plan_rows(stages, 10, workers=2, queue_depth=2)
    assert [r["executor"] for r in rows] == ["sync", "threads", "processes", "torch"]
    assert rows[0]["bound_s"] == pytest.approx(0.040)       # 10 * 4 ms, no overlap
    assert rows[1]["bound_s"] == pytest.approx(0.004 + 9 * 0.002)
    r1 = run_pipeline(stages, 4, "sync")
    r2 = run_pipeline(stages, 4, "threads")
    fig = runs_gantt([r1, r2])
    assert len(fig.axes) == 2 and "sync" in fig.axes[0].get_title(loc="left")
    fig2 = compare_gantt(r2.timeline, simulate(rows[1]["plan"], 4),
                         measured_origin_us=r2.start_us, measured_consumer=r2.consumer_lane,
                         simulated_consumer="sim/compute")
    assert [a.get_title(loc="left") for a in fig2.axes] == ["measured", "simulated (model)"]
    fig3 = idle_vs_queue_figure(8, part_load_times(8, 0.01, 1.0), 0.01, measured={2: 0.1})
    assert fig3.axes[0].get_xlabel() == "queue size (parts)"
