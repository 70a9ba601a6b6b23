"""The pipeline bubble read off PP:<action> spans: hand-made events, a trace made from a simulated
plan gives back the plan's bubble, the committed gloo 1F1B trace judged end to end, and traces
without the spans give no section."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.judge.pipeline_bubble import action_spans, bubble_lines, pipeline_bubble
from distlab.judge.trace_judgement import judge_trace, judgement_json
from distlab.judge.trace_report import report_lines
from distlab.pipeline_parallel import StageTimes, build_plan, simulate
from helpers.paths import RESULTS

TRACES = RESULTS / "traces"
PP = TRACES / "gloo_pp_1f1b_2ranks"


def _ev(name: str, ts: float, dur: float) -> dict:
    return {"name": name, "ph": "X", "ts": ts, "dur": dur, "cat": "user_annotation"}


def test_hand_made_gpipe_two_ranks() -> None:
    # GPipe, 2 ranks, 2 microbatches, F = 10 us, B = 20 us, no gaps but the plan's own
    r0 = [_ev("ProfilerStep#1", 0, 200), _ev("PP:0F0", 0, 10), _ev("PP:0F1", 10, 10),
          _ev("PP:0B0", 60, 20), _ev("PP:0B1", 80, 20), _ev("aten::mm", 1, 2)]
    r1 = [_ev("ProfilerStep#1", 0, 200), _ev("PP:1F0", 10, 10), _ev("PP:1F1", 20, 10),
          _ev("PP:1B0", 30, 20), _ev("PP:1B1", 50, 20), _ev("PP:1RECV_F0", 0, 10)]
    pb = pipeline_bubble({0: action_spans(r0, 0), 1: action_spans(r1, 1)})
    assert pb is not None and pb.schedule == "GPipe"
    assert (pb.ranks, pb.stages, pb.microbatches, pb.steps) == (2, 2, 2, [1])
    # window 0..100 us; each rank busy 60 us
    assert abs(pb.per_rank[0].bubble - 0.4) < 1e-12 and abs(pb.per_rank[1].bubble - 0.4) < 1e-12
    assert abs(pb.closed_form - 1 / 3) < 1e-12
    # the plan starts 0B0 as soon as 1B0 ends (50 us, not 60): step 90 us, bubble 1/3
    assert abs(pb.per_rank[0].plan_bubble - 1 / 3) < 1e-12
    lines = bubble_lines(pb)
    assert "pipeline: rank 0 bubble 40.0% (plan 33.3%)" in "\n".join(lines)


def test_no_actions_no_section() -> None:
    assert pipeline_bubble({0: action_spans([_ev("aten::mm", 0, 5)], 0)}) is None
    assert bubble_lines(None) == []


def test_order_no_schedule_runs_is_said() -> None:
    r0 = [_ev("PP:0B0", 0, 10), _ev("PP:0F0", 10, 10)]  # backward before forward
    pb = pipeline_bubble({0: action_spans(r0, 0)})
    assert pb is not None and pb.schedule is None and pb.per_rank[0].plan_bubble is None
    assert "no schedule" in pb.notes[0]


@settings(max_examples=25, deadline=None)
@given(schedule=st.sampled_from(["GPipe", "1F1B"]), ranks=st.integers(2, 3),
       extra=st.integers(0, 3), data=st.data())
def test_trace_of_a_simulated_plan_gives_back_its_bubble(schedule, ranks, extra, data) -> None:
    m = ranks + extra
    plan = build_plan(schedule, ranks, m)
    f = data.draw(st.lists(st.floats(1e-5, 1e-2), min_size=ranks, max_size=ranks))
    b = data.draw(st.lists(st.floats(1e-5, 1e-2), min_size=ranks, max_size=ranks))
    sim = simulate(plan, StageTimes(tuple(f), tuple(b), (0.0,) * ranks))
    events = {r: [_ev("ProfilerStep#7", 999, sim.step_time_s * 1e6 + 2)] for r in range(ranks)}
    for t in sim.timings:
        events[t.rank].append(_ev(f"PP:{t.action}", 1000 + t.start_s * 1e6,
                                  (t.end_s - t.start_s) * 1e6))
    pb = pipeline_bubble({r: action_spans(ev, r, shift_us=-1000) for r, ev in events.items()},
                         schedule=schedule)
    assert pb is not None and pb.schedule == plan.schedule and pb.steps == [7]
    for r in range(ranks):
        want = sim.idle_s[r] / sim.step_time_s
        assert abs(pb.per_rank[r].bubble - want) < 1e-6
        assert abs(pb.per_rank[r].plan_bubble - want) < 1e-6
    assert abs(pb.plan_overall - sim.bubble_fraction) < 1e-6
    # recognised without the name too (GPipe and 1F1B differ only where m > 1 and ranks > 1)
    again = pipeline_bubble({r: action_spans(ev, r) for r, ev in events.items()})
    assert again is not None and again.schedule in ("GPipe", "1F1B")
    assert [str(a) for a in build_plan(again.schedule, ranks, m).compute(0)] == \
        [str(a) for a in plan.compute(0)]


def test_committed_1f1b_trace_judged() -> None:
    j = judge_trace(PP)
    pb = j.pipeline
    assert pb is not None and pb.schedule == "1F1B"
    assert (pb.ranks, pb.stages, pb.microbatches, len(pb.steps)) == (2, 2, 4, 3)
    assert abs(pb.closed_form - 0.2) < 1e-12          # (p - 1) / (m + p - 1)
    for r in (0, 1):
        b = pb.per_rank[r]
        assert 0.1 < b.bubble < 0.9 and 0.0 < b.plan_bubble < 0.9
        assert b.bubble > b.plan_bubble                 # host gaps the plan does not have
        assert 5_000 < b.window_us < 100_000
    text = "\n".join(report_lines(j))
    assert re.search(r"pipeline: rank 0 bubble \d+\.\d% \(plan \d+\.\d%\)", text)
    assert "## pipeline: 1F1B, 2 ranks, 2 stages, 4 microbatches" in text
    assert max(len(line) for line in text.splitlines() if "pipeline" in line) <= 100
    assert j.fsdp == {} and "## FSDP" not in text
    got = judgement_json(j)["pipeline"]
    assert got["schedule"] == "1F1B" and set(got["per_rank"]) == {0, 1}
    assert "## pipeline" in "\n".join(report_lines(j, rank=1))
    assert "pipeline: rank 0" not in "\n".join(report_lines(j, rank=1))


def test_trace_without_annotations_has_no_section() -> None:
    j = judge_trace(TRACES / "gloo_ddp_2ranks")
    assert j.pipeline is None and j.fsdp == {}
    text = "\n".join(report_lines(j))
    assert "## pipeline" not in text and "## FSDP" not in text
    assert judgement_json(j)["pipeline"] is None and judgement_json(j)["fsdp"] == {}
