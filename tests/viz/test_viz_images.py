"""Notebook 12's figures and explorer, without a browser: they draw what the rows say, with no
colliding texts, and the explorer follows its controls."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest

from distlab.bench.images import pcie_rows
from distlab.loading.image_model import CoreSharing, DecodeModel
from distlab.loading.synthetic_stages import SleepStage
from distlab.viz.figure import figure_png
from distlab.viz.images import ImagesExplorer, crops_figure, pcie_figure, workers_figure
from distlab.viz.layout_check import layout_problems

pytestmark = pytest.mark.timeout(60)


def _rows() -> list[dict]:
    def proc(ex: str, k: int, measured: float, neck: str) -> dict:
        return {"executor": ex, "workers": k, "images_per_s": measured,
                "bound_images_per_s": 300.0 * min(k, 1.3),
                "model_images_per_s": 320.0 * min(k, 1.3),
                "bottleneck": neck, "model_bottleneck": neck,
                "stations": [("worker", 0.02 / k), ("pin+h2d", 0.0), ("step", 0.015)]}
    return [{"executor": "sync", "workers": None, "images_per_s": 180.0},
            {"executor": "threads", "workers": None, "images_per_s": 250.0},
            proc("processes", 1, 290.0, "worker"), proc("processes", 2, 380.0, "step"),
            proc("torch", 1, 280.0, "worker"), proc("torch", 2, 370.0, "step")]


def test_workers_figure_draws_every_executor_and_the_bottleneck() -> None:
    fig = workers_figure(_rows())
    ax, bx = fig.axes
    labels = ax.get_legend_handles_labels()[1]
    assert {"sync (measured)", "threads (measured)", "processes (measured)", "torch (measured)",
            "bound (measured stage costs)", "model (decode model)"} <= set(labels)
    outlined = [p for p in bx.patches if p.get_linewidth() == 2]
    assert len(outlined) == 2                      # one bottleneck per worker count
    figure_png(fig)
    assert layout_problems(fig) == []


def test_pcie_and_crops_figures() -> None:
    tables = {"500x375": pcie_rows(jpeg_nbytes=93_000, width=500, height=375, crop=224),
              "1600x1200": pcie_rows(jpeg_nbytes=850_000, width=1600, height=1200, crop=224)}
    fig = pcie_figure(tables)
    assert len(fig.axes[0].patches) == 6
    figure_png(fig)
    assert layout_problems(fig) == []
    px = [np.zeros((30, 40, 3), np.uint8)] * 2
    fig = crops_figure(px, [np.zeros((16, 16, 3), np.uint8)] * 2, [True, False])
    assert [a.get_title() for a in fig.axes] == ["40x30", "40x30", "crop flipped", "crop"]
    figure_png(fig)


def test_explorer_follows_workers_and_size() -> None:
    names = ["read", "decode", "crop", "collate", "pin", "h2d", "step"]
    stages = [SleepStage(0.0, name=n) for n in names]
    for s in stages[4:]:
        s.placement = "host"
    costs = dict(zip(names, [0.001, 0.010, 0.008, 0.001, 0.0, 0.0, 0.012], strict=True))
    ex = ImagesExplorer(stages, costs, DecodeModel(1e-4, 2e-9, 8e-9), bytes_per_pixel=0.5,
                        batch_size=8, cores=4, max_workers=6, workers=1)
    assert ex.summary.startswith("500x375, 1 workers (1 busy on 4 cores)")
    assert ex.rows[0]["bottleneck"] == "worker" and ex.rows[-1]["bottleneck"] == "step"
    first = ex.png
    ex.workers.value = 5
    assert "5 workers (4 busy on 4 cores)" in ex.summary and ex.png != first
    small = ex.rows[0]["images_per_s"]
    ex.size.value = "3000x2000"
    assert ex.rows[0]["images_per_s"] < small and "JPEG 3000 KB" in ex.summary
    assert layout_problems(ex.figure) == []
    # the legend sits below the curve's axes, so no measured cost can put points under it
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(ex.figure)
    canvas.draw()
    renderer = canvas.get_renderer()
    ax = ex.figure.axes[0]
    assert ax.get_legend().get_window_extent(renderer).y1 < ax.get_window_extent(renderer).y0


def test_explorer_with_shared_cores_names_the_cores() -> None:
    names = ["read", "decode", "crop", "collate", "pin", "h2d", "step"]
    stages = [SleepStage(0.0, name=n) for n in names]
    for s, cat in zip(stages, ["io", "cpu", "cpu", "cpu", "copy", "copy", "compute"], strict=True):
        s.category = cat
    for s in stages[4:]:
        s.placement = "host"
    costs = dict(zip(names, [0.001, 0.010, 0.008, 0.001, 0.0, 0.0, 0.012], strict=True))
    one_core = CoreSharing({1: 0.02, 2: 0.04})              # two processes: one's work
    ex = ImagesExplorer(stages, costs, DecodeModel(1e-4, 2e-9, 8e-9), bytes_per_pixel=0.5,
                        batch_size=8, cores=2, max_workers=3, workers=2, sharing=one_core,
                        hop=(0.001, 0.0005))
    assert [r["bottleneck"] for r in ex.rows] == ["worker", "cores", "cores"]
    assert "bottleneck cores" in ex.summary
    assert "bottleneck: cores" in ex.figure.axes[0].get_legend_handles_labels()[1]
    assert layout_problems(ex.figure) == []


def test_stations_legend_shows_colours_without_the_bottleneck_outline() -> None:
    fig = workers_figure(_rows())
    legend = fig.axes[1].get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["worker", "pin+h2d", "step"]
    assert all(h.get_linewidth() != 2 for h in legend.legend_handles)


@pytest.mark.parametrize("scale", [1.0, 5.0, 60.0, 400.0])
def test_the_stations_legend_collides_with_nothing_whatever_the_times(scale: float) -> None:
    """Station times of a loaded machine put a '100' tick at the top of the right panel, where
    the legend of three columns reached over it (notebook 12 under the browser test)."""
    rows = _rows()
    for r in rows:
        if "stations" in r:
            r["stations"] = [(n, s * scale) for n, s in r["stations"]]
    fig = workers_figure(rows)
    figure_png(fig)
    assert layout_problems(fig) == []


@pytest.mark.parametrize("slow", [0.05, 0.3, 0.6, 1.0])
def test_the_rates_legend_covers_no_measured_point_whatever_the_rates(slow: float) -> None:
    """A busy machine measured the processes at two workers far below the bound: the point sat
    under a legend in the lower right (notebook 12 under CI's browser test)."""
    rows = _rows()
    for r in rows:
        r["images_per_s"] *= slow if r.get("workers") == 2 else 1.0
    fig = workers_figure(rows)
    figure_png(fig)
    assert layout_problems(fig) == []
