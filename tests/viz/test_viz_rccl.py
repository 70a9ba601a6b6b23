"""The RCCL figure: one panel per gfx942 table group, the published points, the model's in the
colour of what RCCL runs, unpriced sizes marked, nothing colliding."""

from __future__ import annotations

import pytest

from distlab.rccl.execution import judge, published_tables
from distlab.viz.layout_check import layout_problems
from distlab.viz.rccl import MI355X_TWO_NODE_PANELS, rccl_tables_figure


def _labels(ax) -> set[str]:
    return {ln.get_label() for ln in ax.lines if not ln.get_label().startswith("_")}


def test_each_panel_shows_its_tables_and_what_rccl_runs() -> None:
    fig = rccl_tables_figure()
    one, two, mi325 = fig.axes
    assert _labels(one) == {"published", "MSCCL allpairs/LL", "MSCCL allpairs/Simple",
                            "ring/Simple"}
    assert _labels(two) == {"published", "ring/Simple", "not priced"}
    assert _labels(mi325) == {"published", "ring/Simple"}
    assert "calibration" in one.get_title() and "held-out" in mi325.get_title()
    # the unpriced crosses sit at the published bus bandwidth of exactly the unpriced sizes
    table = next(t for t in published_tables() if t["id"] == "aac10_mi300x_2node")
    unpriced = next(j for j in judge() if j.id == table["id"]).unpriced
    (cross,) = [ln for ln in two.lines if ln.get_label() == "not priced"]
    assert list(cross.get_xdata()) == list(unpriced)
    want = [p["bytes"] * 2 * 15 / 16 / (p["time_us"] * 1e-6) / 1e9
            for p in table["points"] if p["bytes"] in unpriced]
    assert list(cross.get_ydata()) == pytest.approx(want, rel=1e-12)
    assert layout_problems(fig) == []


def test_the_mi355x_panels_draw_the_tree_priced_leave_one_out() -> None:
    fig = rccl_tables_figure(MI355X_TWO_NODE_PANELS)
    judged = {j.id: j for j in judge()}
    for ax, (tid, _) in zip(fig.axes, MI355X_TWO_NODE_PANELS, strict=True):
        assert _labels(ax) == {"published", "tree/LL", "tree/LL128", "tree/Simple",
                               "ring/Simple"}
        assert "held-out, tree left out" in ax.get_title()
        assert f"median {judged[tid].median_pct:.1f}%" in ax.get_title()
    assert layout_problems(fig) == []
    with pytest.raises(ValueError, match="no published table is named mi999"):
        rccl_tables_figure((("mi999", "x"),))
