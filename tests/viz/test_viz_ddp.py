"""The DDP explorer draws what :mod:`distlab.ddp.step_model` predicts, and follows its sliders."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest

from distlab.collectives import get_preset
from distlab.ddp.step_model import buckets_for_sizes, mlp_ready_order, predict
from distlab.viz.ddp import DdpExplorer

LINK = get_preset("pcie4_x16")


def test_the_explorer_shows_the_step_model_of_its_sliders() -> None:
    ex = DdpExplorer(LINK, 2e-9, bucket_cap_mb=25.0, layers=3, width=256)
    order = mlp_ready_order(3, 256, 2e-9)
    assert ex.order == order
    p = predict(order.sizes, order.ready_s, order.backward_s, LINK, 2, 25.0)
    assert ex.prediction.step_s == pytest.approx(p.step_s, rel=1e-12)
    assert ex.summary.startswith("1 buckets, ") and f"step {p.step_s * 1e3:.2f} ms" in ex.summary
    bars = ex.figure.axes[0].patches
    assert len(bars) == len(order.names)  # one bar segment per parameter
    ex.cap.value = 0.1
    n = len(buckets_for_sizes(list(order.sizes), ex.cap.value))
    assert n > 1 and ex.summary.startswith(f"{n} buckets, ")
    assert f"{n} buckets" in ex.figure.axes[0].get_title()
    ex.layers.value = 5
    assert ex.order == mlp_ready_order(5, 256, 2e-9)
    ex.world.value = 8
    assert ex.prediction.comm_s > p.comm_s  # the same gradients over more ranks


def test_traffic_figure_labels_clear_of_the_legend() -> None:
    """Every bar's ``<name> <MiB>`` label and the phases' legend have their own room."""
    from distlab.ddp.step_model import dataparallel_vs_ddp
    from distlab.viz.ddp import traffic_figure
    from distlab.viz.layout_check import layout_problems

    rows = []
    for name in ("pcie4_x16", "nvlink4_h100", "ethernet_100g"):
        dp, ddp = dataparallel_vs_ddp(789504, 65536, 65536, 4, get_preset(name))
        rows.append((name, dp, ddp))
    fig = traffic_figure(rows)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.texts] == [" DataParallel 5 MiB", " DDP 1 MiB"] * 3
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "broadcast params", "scatter inputs", "gather outputs", "reduce grads", "allreduce grads"]
    assert layout_problems(fig) == []
