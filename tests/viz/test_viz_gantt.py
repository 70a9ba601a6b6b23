"""The Gantt chart of a Timeline: one row per lane, idle gaps of the highlighted lane shaded."""

from __future__ import annotations

from distlab.timeline import Timeline
from distlab.viz.gantt import gantt


def test_gantt_rows_and_gaps() -> None:
    tl = Timeline()
    tl.record("r", "io", "rank0/read", 0, 1000)
    tl.record("c", "compute", "rank0/compute", 1000, 1000)
    tl.record("c", "compute", "rank0/compute", 3000, 1000)
    fig = gantt(tl, highlight_idle="rank0/compute", title="t")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["rank0/read", "rank0/compute"]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["io", "compute", "rank0/compute idle"]
    assert len(ax.patches) >= 2  # shaded idle gaps

    assert fig.axes[0].get_title() == "t"
