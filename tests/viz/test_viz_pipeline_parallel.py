"""Pipeline-parallel figures and widgets: the plan's grid, a step in seconds, measured beside
simulated, the stepper and the explorer, driven without a browser."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402

from distlab.pipeline_parallel.actions import Action, B, F  # noqa: E402
from distlab.pipeline_parallel.cost import grid_bubble_fraction  # noqa: E402
from distlab.pipeline_parallel.plan import PipelinePlan  # noqa: E402
from distlab.pipeline_parallel.schedules.registry import SCHEDULES, build_plan  # noqa: E402
from distlab.pipeline_parallel.simulate import P2PCost, StageTimes, simulate  # noqa: E402
from distlab.timeline import Timeline  # noqa: E402
from distlab.viz.figure import DisplayFigure  # noqa: E402
from distlab.viz.layout_check import JUPYTERLAB_WIDTH_PX, layout_problems  # noqa: E402
from distlab.viz.palette import colour  # noqa: E402
from distlab.viz.pipeline_parallel import (  # noqa: E402
    KIND_LABELS,
    PipelineExplorer,
    PipelineStepper,
    bubble_curve_figure,
    compare_gantt,
    plan_gantt,
    plans_gantt,
    simulation_gantt,
    simulations_gantt,
    timeline_gantt,
)

pytestmark = pytest.mark.timeout(300)

SIZES = {"GPipe": (4, 8, 1), "1F1B": (4, 8, 1), "Interleaved1F1B": (4, 8, 2),
         "LoopedBFS": (2, 4, 3), "InterleavedZeroBubble": (4, 8, 2),
         "ZBVZeroBubble": (4, 8, 2), "DualPipeV": (4, 10, 2)}


def _legend(fig) -> list[str]:
    return [t.get_text() for leg in fig.legends for t in leg.get_texts()]


def _texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def _width_px(fig) -> float:
    return fig.get_tightbbox().width * fig.dpi


@pytest.mark.parametrize("name", SCHEDULES)
def test_every_schedule_draws_on_its_grid_and_simulated(name: str) -> None:
    p, m, v = SIZES[name]
    plan = build_plan(name, p, m, v)
    fig = plan_gantt(plan)
    assert isinstance(fig, DisplayFigure)
    assert layout_problems(fig) == []
    title = fig.axes[0].get_title()
    assert title.startswith(f"{name}: {p} ranks, {m} microbatches")
    assert f"grid bubble {grid_bubble_fraction(plan):.1%}" in title
    assert ("stages per rank" in title) == (v > 1)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == [f"rank {r}"
                                                                     for r in range(p)]
    sim = simulate(plan, StageTimes.equal(plan.num_stages, 1e-3, 1e-3, 1e-3),
                   boundary_nbytes=2**20)
    fig2 = simulation_gantt(sim)
    assert isinstance(fig2, DisplayFigure) and layout_problems(fig2) == []
    assert f"bubble {sim.bubble_fraction:.1%}" in fig2.axes[0].get_title()
    assert _width_px(fig) <= JUPYTERLAB_WIDTH_PX and _width_px(fig2) <= JUPYTERLAB_WIDTH_PX


def test_grid_boxes_labels_and_legend_by_hand() -> None:
    a = Action
    plan = PipelinePlan("hand", 2, 1, 2, "loop",
                        (((a(0, F, 0),), (a(0, F, 1),), (), (a(0, B, 0),), (a(0, B, 1),)),
                         ((), (a(1, F, 0),), (a(1, B, 0), a(1, F, 1)), (a(1, B, 1),))))
    fig = plan_gantt(plan)
    ax = fig.axes[0]
    assert _legend(fig) == [KIND_LABELS["forward"], KIND_LABELS["backward"], "bubble"]
    assert KIND_LABELS["forward"] == "F: forward"
    assert sorted(_texts(fig)) == sorted(["0", "1", "0", "1", "0", "1", "0", "1"])
    faces = {to_hex(c.get_facecolor()[0]) for c in ax.collections}
    assert faces == {colour("forward"), colour("backward"), colour("bubble")}
    halves = [c for c in ax.collections
              if c.get_paths()[0].get_extents().height == pytest.approx(0.4)]
    assert len(halves) == 2                          # the overlapped step: two half boxes
    assert "grid bubble 30.0%" in ax.get_title()     # 3 idle cells of 10
    assert layout_problems(fig) == []


def test_stage_labels_when_a_rank_holds_several_stages() -> None:
    fig = plan_gantt(build_plan("Interleaved1F1B", 2, 2, 2))
    assert any(t.endswith(("s0", "s2")) for t in _texts(fig))
    assert layout_problems(fig) == []


def test_a_wide_plan_drops_labels_that_do_not_fit_and_stays_readable() -> None:
    fig = plan_gantt(build_plan("ZBVZeroBubble", 8, 16, 2))
    assert _texts(fig) == []
    assert layout_problems(fig) == [] and _width_px(fig) <= JUPYTERLAB_WIDTH_PX


def _closest_labels_px(fig) -> float:
    """The smallest horizontal gap, in pixels, between two box labels of one row (inf when
    no row has two)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    rows: dict[tuple[int, float], list] = {}
    for ax in fig.axes:
        for t in ax.texts:
            box = t.get_window_extent(renderer)
            rows.setdefault((id(ax), round(t.get_position()[1], 3)), []).append(box)
    gaps = [b.x0 - a.x1 for boxes in rows.values()
            for a, b in zip(sorted(boxes, key=lambda b: b.x0),
                            sorted(boxes, key=lambda b: b.x0)[1:], strict=False)]
    return min(gaps, default=float("inf"))


@pytest.mark.parametrize(("schedule", "ranks", "microbatches", "v"),
                         [("Interleaved1F1B", 8, 16, 4), ("1F1B", 8, 32, None),
                          ("1F1B", 4, 8, None), ("Interleaved1F1B", 4, 8, 2)])
def test_neighbouring_box_labels_never_run_together(schedule, ranks, microbatches, v) -> None:
    """Labels of neighbouring boxes keep a clear gap (the explorer at 8 ranks x 4 stages once
    read "012345"); wide boxes still carry theirs."""
    ex = PipelineExplorer(schedule, ranks=ranks, microbatches=microbatches, stages_per_rank=v)
    assert _closest_labels_px(ex.figure) >= 3.0
    if ranks == 4:
        assert len(_texts(ex.figure)) >= microbatches


def test_step_marks_a_time_step_and_fades_the_rest() -> None:
    plan = build_plan("1F1B", 2, 3)
    fig = plan_gantt(plan, step=2)
    alphas = {c.get_alpha() for c in fig.axes[0].collections}
    assert alphas >= {1.0, 0.3}
    assert layout_problems(fig) == []
    with pytest.raises(ValueError, match="step=99"):
        plan_gantt(plan, step=99)
    with pytest.raises(TypeError, match="PipelinePlan"):
        plan_gantt("1F1B")  # type: ignore[arg-type]


def test_timeline_gantt_of_a_measured_like_timeline() -> None:
    tl = Timeline()
    tl.record("0F0", "forward", "rank0/compute", 1000.0, 400.0,
              {"stage": 0, "microbatch": 0, "kind": "F"})
    tl.record("1F0", "forward", "rank1/compute", 1500.0, 400.0,
              {"stage": 1, "microbatch": 0, "kind": "F"})
    tl.record("1B0", "backward", "rank1/compute", 1900.0, 800.0,
              {"stage": 1, "microbatch": 0, "kind": "B"})
    tl.record("0B0", "backward", "rank0/compute", 2800.0, 800.0,
              {"stage": 0, "microbatch": 0, "kind": "B"})
    tl.record("send", "comm", "rank0/p2p", 1400.0, 100.0)          # not a compute lane
    fig = timeline_gantt(tl, title="measured")
    ax = fig.axes[0]
    assert ax.get_xlabel() == "time (ms)" and ax.get_xlim() == pytest.approx((0.0, 2.6))
    assert _legend(fig) == ["F: forward", "B: backward", "bubble"]
    assert layout_problems(fig) == []
    with pytest.raises(TypeError, match="Timeline"):
        timeline_gantt([])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"no compute spans .* its lanes: \['rank0/p2p'\]"):
        timeline_gantt(tl.filter(lanes=["rank0/p2p"]))


def test_overlapping_spans_of_one_rank_sit_in_half_rows() -> None:
    a = Action
    plan = PipelinePlan("hand", 1, 1, 2, "loop",
                        (((a(0, F, 0),), (a(0, B, 0), a(0, F, 1)), (a(0, B, 1),)),))
    sim = simulate(plan, p2p=P2PCost.free(), overlap="max")
    fig = simulation_gantt(sim)
    heights = sorted({round(c.get_paths()[0].get_extents().height, 6)
                      for c in fig.axes[0].collections})
    assert heights == [0.4]          # the one rank has two sub-tracks all along
    assert layout_problems(fig) == []


def test_measured_beside_simulated_on_one_time_axis() -> None:
    plan = build_plan("1F1B", 4, 8)
    sim = simulate(plan, StageTimes.equal(4, 1e-3, 1e-3, 1e-3), p2p=P2PCost.free())
    slower = simulate(plan, StageTimes.equal(4, 1e-3, 1e-3, 1e-3).with_imbalance(1, 1.5),
                      p2p=P2PCost.free())
    fig = compare_gantt(slower.to_timeline(origin_us=5e6), sim)
    top, bottom = fig.axes
    assert top.get_title() == "measured" and bottom.get_title().startswith("1F1B simulated")
    assert top.get_xlim() == bottom.get_xlim()
    assert top.get_xlim()[1] == pytest.approx(slower.step_time_s * 1e3)
    assert layout_problems(fig) == []
    fig2 = compare_gantt(slower.to_timeline(), sim.to_timeline(), titles=("run", "model"))
    assert [ax.get_title() for ax in fig2.axes] == ["run", "model"]


def test_stepper_builds_and_follows_its_controls() -> None:
    s = PipelineStepper("1F1B", ranks=4, microbatches=8)
    assert s.plan is not None and s.step.max == s.steps - 1 == 21
    assert s.summary.startswith("time step 0 of 0..21: r0 0F0 (1), r1 idle (0)")
    first = s.png
    s.step.value = 5
    assert "r2 2B0 (1)" in s.summary and s.png != first
    assert layout_problems(s.figure) == []
    s.schedule.value = "DualPipeV"                 # stages per rank follow the schedule
    assert s.stages_per_rank.value == 2 and s.plan.schedule == "DualPipeV"
    assert s.step.max == s.steps - 1 and s.step.value == 5
    s.step.value = s.step.max
    s.ranks.value = 2                              # a shorter plan clamps the step
    assert s.step.value == s.step.max == s.steps - 1
    s.microbatches.value = 2                       # DualPipeV needs 2 * ranks = 4
    assert s.plan is None and "microbatches=2 is not allowed for DualPipeV" in s.summary
    assert layout_problems(s.figure) == []
    s.microbatches.value = 4
    assert s.plan is not None and s.error == ""


def test_explorer_simulates_and_reacts() -> None:
    e = PipelineExplorer("1F1B", ranks=4, microbatches=8)
    assert e.summary == ("step 33 ms, bubble 27.3% (closed form for equal stages 27.3%), "
                         "peak microbatches in flight per rank [4, 3, 2, 1]")
    assert e.simulation is not None and layout_problems(e.figure) == []
    e.imbalance.value = 2.0
    # stage 0 now computes 8 x (2 + 4) ms and waits once, for the first gradient: its 4
    # forwards end at 8 ms, the round trip through stages 1-3 brings B0 back at 11 ms
    assert e.simulation.step_time_s == pytest.approx(8 * 6e-3 + 3e-3)
    assert "bubble 41.2%" in e.summary
    e.schedule.value = "ZBVZeroBubble"
    assert e.stages_per_rank.value == 2 and e.slow_stage.max == 7
    assert "no closed form" in e.summary
    e.slow_stage.value = 7
    e.ranks.value = 2                              # the slow stage stays among 4 stages
    assert e.slow_stage.max == 3 and e.slow_stage.value == 3
    assert layout_problems(e.figure) == []
    e.schedule.value = "1F1B"
    e.microbatches.value = 1                       # refused: 1F1B needs microbatches >= ranks
    assert e.simulation is None and "microbatches=1" in e.summary


def test_plans_side_by_side_with_one_legend() -> None:
    plans = [build_plan(name, 4, 8) for name in ("InterleavedZeroBubble", "ZBVZeroBubble",
                                                 "DualPipeV")]
    fig = plans_gantt(plans)
    assert isinstance(fig, DisplayFigure) and len(fig.axes) == 3
    assert [ax.get_title().split(":")[0] for ax in fig.axes] == [p.schedule for p in plans]
    assert len(fig.legends) == 1
    assert _legend(fig) == [KIND_LABELS[k] for k in ("forward", "backward", "backward_input",
                                                     "backward_weight")] + ["bubble"]
    assert layout_problems(fig) == [] and _width_px(fig) <= JUPYTERLAB_WIDTH_PX
    fig2 = plans_gantt(plans[:1], titles=["mine"])
    assert fig2.axes[0].get_title() == "mine"
    with pytest.raises(ValueError, match="one title per plan"):
        plans_gantt(plans, titles=["one"])
    with pytest.raises(ValueError, match="at least one"):
        plans_gantt([])
    with pytest.raises(TypeError, match="PipelinePlan"):
        plans_gantt(["1F1B"])  # type: ignore[list-item]


def test_simulations_on_one_time_axis() -> None:
    sims = []
    for name in ("1F1B", "InterleavedZeroBubble"):
        plan = build_plan(name, 4, 8)
        v = plan.stages_per_rank
        sims.append(simulate(plan, StageTimes.equal(plan.num_stages, 1e-3 / v, 1e-3 / v,
                                                    1e-3 / v), p2p=P2PCost.free()))
    fig = simulations_gantt(sims)
    top, bottom = fig.axes
    assert top.get_xlim() == bottom.get_xlim() == pytest.approx((0.0, 33.0))   # ms, 1F1B's
    assert top.get_title().startswith("1F1B simulated") and "bubble 27.3%" in top.get_title()
    assert "step 25.5 ms" in bottom.get_title()
    assert top.get_xlabel() == "" and bottom.get_xlabel() == "time (ms)"
    assert len(fig.legends) == 1
    assert layout_problems(fig) == [] and _width_px(fig) <= JUPYTERLAB_WIDTH_PX
    assert simulations_gantt(sims, titles=["a", "b"]).axes[1].get_title() == "b"
    with pytest.raises(ValueError, match="one title per simulation"):
        simulations_gantt(sims, titles=["a"])
    with pytest.raises(TypeError, match="Simulations"):
        simulations_gantt([sims[0].to_timeline()])  # type: ignore[list-item]


def test_bubble_curve_markers_simulated_lines_closed_form() -> None:
    ms = list(range(2, 17, 2))
    fig = bubble_curve_figure(4, ms, ["1F1B", ("Interleaved1F1B", 2), "ZBVZeroBubble"])
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines) == ["1F1B (closed form)", "1F1B (simulated)",
                           "Interleaved1F1B (v=2, closed form)",
                           "Interleaved1F1B (v=2, simulated)",
                           "ZBVZeroBubble (v=2, simulated, no closed form)"]
    # 1F1B refuses m < ranks: no point at m = 2; its points lie on (p - 1) / (m + p - 1)
    sim = lines["1F1B (simulated)"]
    assert list(sim.get_xdata()) == [m for m in ms if m >= 4]
    assert list(sim.get_ydata()) == pytest.approx([100 * 3 / (m + 3) for m in ms if m >= 4])
    assert list(lines["1F1B (closed form)"].get_ydata()) == pytest.approx(
        list(sim.get_ydata()))
    # Interleaved1F1B with m < p has no closed form: the line starts at m = 4
    assert lines["Interleaved1F1B (v=2, closed form)"].get_xdata()[0] == 4
    zbv = build_plan("ZBVZeroBubble", 4, 8)
    at8 = simulate(zbv, p2p=P2PCost.free()).bubble_fraction
    assert lines["ZBVZeroBubble (v=2, simulated, no closed form)"].get_ydata()[
        ms.index(8)] == pytest.approx(100 * at8)
    assert {to_hex(line.get_color()) for line in ax.get_lines()} == {
        colour("1F1B"), colour("Interleaved1F1B"), colour("ZBVZeroBubble")}
    assert ax.get_xlabel() == "microbatches m"
    assert layout_problems(fig) == [] and _width_px(fig) <= JUPYTERLAB_WIDTH_PX
    with pytest.raises(ValueError, match="DualPipeV builds no plan"):
        bubble_curve_figure(4, [2, 4], ["DualPipeV"])
    with pytest.raises(ValueError, match="not a known schedule"):
        bubble_curve_figure(4, [4], ["2F2B"])
    with pytest.raises(TypeError, match="name or"):
        bubble_curve_figure(4, [4], [("1F1B",)])  # type: ignore[list-item]
