"""The RCCL figure: one panel per gfx942 table group, the published points, the model's in the
colour of what RCCL runs, unpriced sizes marked, nothing colliding."""

from __future__ import annotations

import pytest

from distlab.evidence.rccl.judged import judge, published_tables
from distlab.viz.layout_check import layout_problems
from distlab.viz.rccl import MI355X_TWO_NODE_PANELS, rccl_tables_figure


def _labels(ax) -> set[str]:
    return {ln.get_label() for ln in ax.lines if not ln.get_label().startswith("_")}


def test_each_panel_shows_its_tables_and_what_rccl_runs() -> None:
    fig = rccl_tables_figure()
    one, two, mi325 = fig.axes
    assert _labels(one) == {"published", "MSCCL allpairs/LL", "MSCCL allpairs/Simple",
                            "ring/Simple"}
    assert _labels(two) == {"published", "tree/LL", "tree/Simple", "ring/Simple"}
    assert _labels(mi325) == {"published", "ring/Simple"}
    assert "calibration" in one.get_title() and "held-out" in mi325.get_title()
    assert layout_problems(fig) == []


def test_unpriced_sizes_are_crosses_at_the_published_bus_bandwidth(monkeypatch) -> None:
    """No published table has an unpriced size now; a judgement that leaves the two-node MI300X
    table's tree sizes unpriced draws them as crosses at exactly their published values."""
    import dataclasses

    import distlab.viz.rccl as viz

    table = next(t for t in published_tables() if t["id"] == "aac10_mi300x_2node")
    tree = [p["bytes"] for p in table["points"] if 65536 <= p["bytes"] <= 256 << 20]

    def judged():
        return [dataclasses.replace(j, rows=tuple(r for r in j.rows if r[0] not in tree),
                                    unpriced=tuple(tree))
                if j.id == table["id"] else j for j in judge()]

    monkeypatch.setattr(viz, "judge", judged)
    fig = rccl_tables_figure()
    two = fig.axes[1]
    assert _labels(two) == {"published", "ring/Simple", "not priced"}
    unpriced = tree
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
