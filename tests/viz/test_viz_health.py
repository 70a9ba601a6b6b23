"""The health figure and the paste box, without a browser."""

from __future__ import annotations

from distlab.health.setup import setup_of
from distlab.health.verdict import judge_run
from distlab.logs.nccl_tests import read_log
from distlab.viz.health import VERDICT_COLOURS, LogBox, health_figure
from helpers.paths import ROOT

LOGS = ROOT / "results" / "nccl-tests-logs"
RACKS = LOGS / "h100_3nodes_roce_two_racks.log"


def _racks():
    (run,) = read_log(RACKS)
    return judge_run(run, setup_of(run, nics=16, nic_gbits=200, fabric="roce"))


def test_the_figure_shows_every_row_by_its_verdict_inside_or_outside_the_band() -> None:
    v = _racks()
    fig = health_figure(v)
    (ax,) = fig.axes
    points = [ln for ln in ax.lines if ln.get_marker() == "o"]
    assert [ln.get_color() for ln in points] == [VERDICT_COLOURS["low"]]
    assert len(points[0].get_xdata()) == len(v.rows) == 11
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[0].startswith("healthy") and "low (11)" in labels
    lo, hi = ax.get_ylim()
    assert lo < min(r.share for r in v.rows) and hi > 1
    assert all(t.get_text() == f"{t.get_position()[1]:g}" for t in ax.get_yticklabels())
    assert "the fabric or its routing between nodes" in ax.get_title()


def test_a_run_not_priced_is_a_message() -> None:
    (run,) = read_log(ROOT / "tests" / "logs" / "data" / "mpirun_old_format.log")
    v = judge_run(run, setup_of(run, network="ib_hdr200x8"))
    fig = health_figure(v)
    assert "not priced" in fig.axes[0].texts[0].get_text()


def test_the_box_judges_what_is_pasted_and_says_what_is_wrong(capsys) -> None:
    box = LogBox()
    box.text.value = RACKS.read_text()
    box.nics.value, box.nic_gbps.value, box.fabric.value = 16, 200, "roce"
    (v,) = box.judge()
    assert v.verdict == "low" and v.causes[0].name.startswith("the fabric")
    box.nics.value = 0
    assert box.judge() == []          # three nodes and no NICs: one line in the output
    box.text.value = "not a log"
    assert box.judge() == []
