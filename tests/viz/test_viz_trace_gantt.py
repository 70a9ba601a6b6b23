"""The trace Gantt draws the ranks asked for (the explorer's rank choice redraws it) and a
data-loader row only where a drawn rank's trace has data-loader activity."""

from __future__ import annotations

import pytest

from distlab.judge.trace_judgement import judge_trace
from distlab.trace.breakdown import activity_intervals
from distlab.viz.trace import TraceExplorer, rank_gantt
from helpers.paths import RESULTS

TRACES = RESULTS / "traces"


def _labels(fig) -> list[str]:
    return [t.get_text() for t in fig.axes[0].get_yticklabels()]


def _legend(fig) -> list[str]:
    return [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


def test_the_explorer_redraws_the_gantt_for_the_rank_picked() -> None:
    ex = TraceExplorer({"gloo 3 ranks": TRACES / "gloo_ddp_3ranks"})
    every = _labels(ex.draw().figure)
    assert {label.split()[1] for label in every} == {"0", "1", "2"}
    ex.rank.value = 1
    one = _labels(ex.draw().figure)
    assert one and all(label.startswith("rank 1 ") for label in one)


def test_a_data_loader_row_only_where_a_trace_has_one() -> None:
    with_loader = judge_trace(TRACES / "gloo_ddp_2ranks")
    assert any(len(activity_intervals(rt).get("data_loader", ((),))[0])
               for rt in with_loader.run.ranks.values())
    fig = rank_gantt(with_loader)
    assert "rank 0 data loader" in _labels(fig) and "data loader" in _legend(fig)
    without = judge_trace(TRACES / "hta_cpu_only")
    assert not any(len(activity_intervals(rt).get("data_loader", ((),))[0])
                   for rt in without.run.ranks.values())
    fig = rank_gantt(without)
    assert not any("data loader" in label for label in _labels(fig) + _legend(fig))


def test_ranks_not_in_the_trace_are_named() -> None:
    with pytest.raises(ValueError, match=r"ranks must be among \[0, 1\], got \[7\]"):
        rank_gantt(judge_trace(TRACES / "gloo_ddp_2ranks"), ranks=[7])


def test_communication_past_the_last_step_is_said_on_the_gantt() -> None:
    from distlab.viz.trace import past_last_step_ms

    cpu = judge_trace(TRACES / "hta_cpu_only")
    late = past_last_step_ms(cpu)
    assert set(late) == {34} and 1000 < late[34] < 1100      # 210 ms step, calls to ~1270 ms
    texts = [t.get_text() for t in rank_gantt(cpu).axes[0].texts]
    assert any("rank 34: communication runs" in t and "past its last ProfilerStep" in t
               for t in texts)
    gloo = judge_trace(TRACES / "gloo_ddp_2ranks")
    assert past_last_step_ms(gloo) == {}
    assert not rank_gantt(gloo).axes[0].texts
