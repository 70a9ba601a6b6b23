"""The seven pipeline schedules as plans, equal to torch.distributed.pipelining's own.

For every schedule and every (ranks, stages_per_rank, microbatches) on a grid, torch's class is
built from mock stages (``helpers.torch_pipelining``): where torch builds it, the plan's grid
equals torch's ``pipeline_order`` (multi-stage schedules: idle steps and overlapped pairs
included) or its compute order equals the order torch's ``_step_microbatches`` runs (GPipe,
1F1B); where torch refuses, :func:`build_plan` raises ``ValueError`` saying why. Then property
tests of plan validity, and name resolution and bad-input tests.
"""

from __future__ import annotations

import logging
import re
from collections import Counter

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from torch.distributed.pipelining import schedules as torch_schedules

from distlab.pipeline_parallel import Action, Kind, PipelinePlan
from distlab.pipeline_parallel.schedules import (
    dualpipe_v,
    gpipe,
    interleaved_1f1b,
    interleaved_zero_bubble,
    looped_bfs,
    one_f_one_b,
    zbv_zero_bubble,
)
from distlab.pipeline_parallel.schedules._common import asap_grid
from distlab.pipeline_parallel.schedules.registry import (
    INFO,
    SCHEDULES,
    build_plan,
    check_combination,
    schedule_info,
    schedule_name,
)
from helpers.torch_pipelining import (
    SINGLE_STAGE,
    TORCH_CLASSES,
    build_torch_schedule,
    torch_grid,
    torch_pipeline_order_ir,
    torch_refusal,
    torch_steps,
)

RANKS = range(1, 9)
STAGES_PER_RANK = range(1, 5)
MICROBATCHES = range(1, 17)

BUILDERS = {
    "GPipe": gpipe.gpipe, "1F1B": one_f_one_b.one_f_one_b,
    "Interleaved1F1B": interleaved_1f1b.interleaved_1f1b, "LoopedBFS": looped_bfs.looped_bfs,
    "InterleavedZeroBubble": interleaved_zero_bubble.interleaved_zero_bubble,
    "ZBVZeroBubble": zbv_zero_bubble.zbv_zero_bubble, "DualPipeV": dualpipe_v.dualpipe_v,
}


@pytest.fixture(autouse=True)
def _quiet_torch_logs():
    """torch's schedules log at INFO ("Using ScheduleGPipe") on every build."""
    logger = logging.getLogger("torch.distributed.pipelining.schedules")
    level = logger.level
    logger.setLevel(logging.WARNING)
    yield
    logger.setLevel(level)


def grid_strings(plan: PipelinePlan) -> tuple[tuple[tuple[str, ...], ...], ...]:
    return tuple(tuple(tuple(str(a) for a in step) for step in row) for row in plan.grid)


def refused_argument(exc: BaseException) -> str:
    """Which of our arguments a torch refusal is about."""
    return "stages_per_rank" if "stages per rank" in str(exc) else "microbatches"


# ---------------------------------------------------------------------------------------------
# equal to torch


@pytest.mark.parametrize("ranks", RANKS)
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_plan_equals_torch_or_both_refuse(schedule: str, ranks: int) -> None:
    single = INFO[schedule].single_stage
    compared = refused = 0
    mismatches: list[str] = []
    for spr in ([1] if single else STAGES_PER_RANK):
        for mb in MICROBATCHES:
            exc = torch_refusal(schedule, ranks, spr, mb)
            if exc is not None:
                assert isinstance(exc, ValueError), exc
                arg = refused_argument(exc)
                value = spr if arg == "stages_per_rank" else mb
                with pytest.raises(ValueError, match=rf"{arg}={value} .*{TORCH_CLASSES[schedule]}"):
                    build_plan(schedule, ranks, mb, spr)
                refused += 1
                continue
            plan = build_plan(schedule, ranks, mb, spr)
            compared += 1
            if single:  # torch fixes only the order: compare each rank's compute order
                got = tuple(tuple((str(a),) for a in plan.compute(r)) for r in range(ranks))
            else:  # the whole grid: idle steps and overlapped pairs included
                got = grid_strings(plan)
            if got != torch_grid(schedule, ranks, spr, mb):
                mismatches.append(f"stages_per_rank={spr} microbatches={mb}")
    assert not mismatches, f"{schedule} ranks={ranks} differs from torch at {mismatches[:5]}"
    assert compared > 0


def test_grid_covers_every_refusal_kind() -> None:
    """The combinations torch refuses on the test grid, by schedule and reason (so the grid
    above exercises each rule)."""
    seen: Counter[tuple[str, str]] = Counter()
    for schedule in SCHEDULES:
        for ranks in RANKS:
            for spr in ([1] if INFO[schedule].single_stage else STAGES_PER_RANK):
                for mb in MICROBATCHES:
                    exc = torch_refusal(schedule, ranks, spr, mb)
                    if exc is not None:
                        seen[schedule, re.sub(r"\d+", "N", str(exc))] += 1
    assert {s for s, _ in seen} == {"1F1B", "Interleaved1F1B", "InterleavedZeroBubble",
                                    "ZBVZeroBubble", "DualPipeV"}
    assert len(seen) == 6  # ZBV's 2-stages rule is shared by DualPipeV


@pytest.mark.parametrize("schedule,ranks,spr,mb", [
    (s, ranks, spr, mb) for s in SCHEDULES if not INFO[s].single_stage
    for ranks, spr, mb in [(1, 2, 4), (3, 2, 6), (4, 2, 8), (4, 3, 12)]
    if spr == 2 or INFO[s].style == "loop"])
def test_torch_pipeline_order_is_the_same_from_every_rank(schedule, ranks, spr, mb) -> None:
    """The reference is built from rank 0's stages; every rank computes the same order."""
    reference = torch_grid(schedule, ranks, spr, mb)
    for rank in range(ranks):
        assert torch_pipeline_order_ir(schedule, ranks, spr, mb, rank) == reference
        assert torch_steps(schedule, ranks, spr, mb, rank) == reference[rank]


@pytest.mark.parametrize("ranks,mb", [(1, 1), (2, 3), (4, 4), (4, 9), (6, 7)])
def test_single_stage_ir_orders(ranks: int, mb: int) -> None:
    """torch's ``_get_pipeline_order`` IR of GPipe has our compute order; 1F1B's has it on every
    rank but the last, whose forwards torch 2.13 misnames ``F1 .. F(m)`` (a known bug; accepted
    fixed too)."""
    ir = torch_pipeline_order_ir("GPipe", ranks, 1, mb)
    plan = build_plan("GPipe", ranks, mb)
    assert [[a for s in row for a in s] for row in ir] == \
        [[str(a) for a in plan.compute(r)] for r in range(ranks)]
    ir = torch_pipeline_order_ir("1F1B", ranks, 1, mb)
    plan = build_plan("1F1B", ranks, mb)
    for rank in range(ranks):
        want = plan.compute(rank)
        got = [Action.parse(a) for s in ir[rank] for a in s]
        if rank == ranks - 1 and got != list(want):
            shifted = [Action(a.stage, a.kind, a.microbatch + (a.kind is Kind.FORWARD))
                       for a in want]
            assert got == shifted
        else:
            assert got == list(want)


def test_single_stage_reference_is_the_runtime_order() -> None:
    """The GPipe/1F1B reference is recorded from ``_step_microbatches``, one stage per rank."""
    assert torch_steps("1F1B", 4, 1, 6, 3)[:4] == (("3F0",), ("3B0",), ("3F1",), ("3B1",))
    assert torch_steps("GPipe", 2, 1, 2, 0) == (("0F0",), ("0F1",), ("0B0",), ("0B1",))
    with pytest.raises(ValueError, match="stages_per_rank=1"):
        build_torch_schedule("GPipe", 2, 2, 4)


# ---------------------------------------------------------------------------------------------
# validity


def _combo(schedule: str):
    info = INFO[schedule]
    spr = st.just(1) if info.single_stage else st.just(2) if info.style == "v" else \
        st.integers(1, 4)
    return st.tuples(st.just(schedule), st.integers(1, 8), spr, st.integers(1, 20))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(SCHEDULES).flatmap(_combo))
def test_plan_is_valid(combo) -> None:
    schedule, ranks, spr, mb = combo
    try:
        check_combination(schedule, ranks, mb, spr)
    except ValueError:
        assume(False)
    plan = build_plan(schedule, ranks, mb, spr)
    assert (plan.schedule, plan.ranks, plan.stages_per_rank, plan.microbatches) == \
        (schedule, ranks, spr, mb)
    assert plan.style == INFO[schedule].style
    assert len(plan.grid) == ranks
    forwards: Counter[tuple[int, int]] = Counter()
    backwards: Counter[tuple[int, int]] = Counter()
    for rank in range(ranks):
        seen: set[Action] = set()
        for step in plan.grid[rank]:
            assert len(step) <= 2
            if len(step) == 2:  # DualPipe-V's overlap: a forward beside a full backward
                f, b = step
                assert (f.kind, b.kind) == (Kind.FORWARD, Kind.FULL_BACKWARD)
                assert f.stage != b.stage
        for a in plan.compute(rank):
            assert a.kind.is_compute
            assert plan.rank_of(a.stage) == rank, f"{a} on rank {rank}"
            assert 0 <= a.microbatch < mb
            assert a not in seen, f"{a} twice on rank {rank}"
            key = (a.stage, a.microbatch)
            if a.kind is Kind.FORWARD:
                forwards[key] += 1
            else:
                assert Action(a.stage, Kind.FORWARD, a.microbatch) in seen, f"{a} before its F"
                if a.kind is Kind.BACKWARD_WEIGHT:
                    assert Action(a.stage, Kind.BACKWARD_INPUT, a.microbatch) in seen
                else:
                    backwards[key] += 1
            seen.add(a)
        ins = {(a.stage, a.microbatch) for a in seen if a.kind is Kind.BACKWARD_INPUT}
        ws = {(a.stage, a.microbatch) for a in seen if a.kind is Kind.BACKWARD_WEIGHT}
        assert ins == ws  # every I has its W on the same rank
    everything = {(s, m) for s in range(plan.num_stages) for m in range(mb)}
    assert forwards == Counter(everything)
    assert backwards == Counter(everything)  # one B or one I each
    if not INFO[schedule].splits_backward:
        assert not plan.splits_backward and not ins
    # the orders can run: no rank waits forever on another
    asap_grid(plan.num_stages, [plan.compute(r) for r in range(ranks)])


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["GPipe", "1F1B"]), st.integers(1, 8), st.integers(1, 20))
def test_single_stage_grids_run_each_action_as_early_as_possible(schedule, ranks, mb) -> None:
    """GPipe and 1F1B's grids are unit-time: each action after its dependencies, and an idle
    step only where the next action is still waiting."""
    assume(schedule == "GPipe" or mb >= ranks)
    plan = build_plan(schedule, ranks, mb)
    when = {a: t for row in plan.grid for t, step in enumerate(row) for a in step}
    for row in plan.grid:
        assert row[-1] != ()
        for t, step in enumerate(row):
            if step:
                (a,) = step
                assert all(when[d] < t for d in plan.dependencies(a))
            else:
                nxt = next(s[0] for s in row[t:] if s)
                assert any(when[d] >= t for d in plan.dependencies(nxt))


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_builders_are_pure_functions(schedule: str) -> None:
    spr = INFO[schedule].default_stages_per_rank
    plan = BUILDERS[schedule](4, spr, 8)
    assert plan == BUILDERS[schedule](4, spr, 8) == build_plan(schedule, 4, 8)
    assert INFO[schedule].build is BUILDERS[schedule]


# ---------------------------------------------------------------------------------------------
# names and the registry


def test_schedule_names_are_torch_names() -> None:
    assert SCHEDULES == ("GPipe", "1F1B", "Interleaved1F1B", "LoopedBFS",
                         "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV")
    for name in SCHEDULES:
        info = INFO[name]
        cls = torch_schedules.get_schedule_class(name)
        assert cls.__name__ == info.torch_class == TORCH_CLASSES[name]
        assert info.single_stage == issubclass(cls, torch_schedules.PipelineScheduleSingle)
        assert info.single_stage == (name in SINGLE_STAGE)
        assert info.default_stages_per_rank == (1 if info.single_stage else 2)
        assert info.description and info.style in ("loop", "v")
    assert [n for n in SCHEDULES if INFO[n].style == "v"] == ["ZBVZeroBubble", "DualPipeV"]
    assert [n for n in SCHEDULES if INFO[n].splits_backward] == \
        ["InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV"]
    for name in SCHEDULES:
        assert build_plan(name, 2, 8).splits_backward == INFO[name].splits_backward


@pytest.mark.parametrize("name", SCHEDULES)
def test_schedule_name_resolves_any_case_and_torch_class(name: str) -> None:
    for text in (name, name.lower(), name.upper(), f"  {name} ", INFO[name].torch_class,
                 INFO[name].torch_class.lower()):
        assert schedule_name(text) == name
        assert schedule_info(text) is INFO[name]
    assert build_plan(name.lower(), 2, 8) == build_plan(name, 2, 8)


@pytest.mark.parametrize("text", ["", "gpipe2", "Schedule", "PipelineScheduleSingle",
                                  "PipelineScheduleMulti", "zero bubble", "1f1"])
def test_unknown_schedule_lists_the_allowed_names(text: str) -> None:
    with pytest.raises(ValueError, match="not a known schedule") as err:
        schedule_name(text)
    for name in SCHEDULES:
        assert name in str(err.value)
    with pytest.raises(ValueError, match="allowed"):
        build_plan(text, 2, 4)


@pytest.mark.parametrize("text", [None, 3, b"GPipe", ["GPipe"]])
def test_schedule_name_must_be_a_str(text) -> None:
    with pytest.raises(TypeError, match="schedule"):
        schedule_name(text)


# ---------------------------------------------------------------------------------------------
# bad inputs


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("arg", ["ranks", "microbatches", "stages_per_rank"])
@pytest.mark.parametrize("value", [0, -1])
def test_sizes_below_one_are_refused(schedule: str, arg: str, value: int) -> None:
    kwargs = {"ranks": 2, "microbatches": 8, "stages_per_rank": None, arg: value}
    with pytest.raises(ValueError, match=rf"{arg} must be an int >= 1, got {value}"):
        build_plan(schedule, **kwargs)


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("arg", ["ranks", "microbatches", "stages_per_rank"])
@pytest.mark.parametrize("value", [2.0, "2", True, np.float64(2.0)])
def test_sizes_of_the_wrong_type_are_refused(schedule: str, arg: str, value) -> None:
    kwargs = {"ranks": 2, "microbatches": 8, "stages_per_rank": None, arg: value}
    with pytest.raises(TypeError, match=rf"{arg} must be an int"):
        build_plan(schedule, **kwargs)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_numpy_ints_build_the_same_plan(schedule: str) -> None:
    spr = INFO[schedule].default_stages_per_rank
    assert build_plan(schedule, np.int64(2), np.int32(8), np.uint8(spr)) == \
        build_plan(schedule, 2, 8, spr)


@pytest.mark.parametrize("schedule", ["GPipe", "1F1B"])
@pytest.mark.parametrize("spr", [2, 3])
def test_single_stage_schedules_take_one_stage_per_rank(schedule: str, spr: int) -> None:
    with pytest.raises(ValueError, match=rf"stages_per_rank={spr} .*one stage per rank"):
        build_plan(schedule, 2, 8, spr)
    assert build_plan(schedule, 2, 8).stages_per_rank == 1


@pytest.mark.parametrize("schedule", ["ZBVZeroBubble", "DualPipeV"])
@pytest.mark.parametrize("spr", [1, 3, 4])
def test_v_schedules_take_exactly_two_stages_per_rank(schedule: str, spr: int) -> None:
    with pytest.raises(ValueError, match=rf"stages_per_rank={spr} .*exactly 2 per rank"):
        build_plan(schedule, 2, 8, spr)
    assert build_plan(schedule, 2, 8).stages_per_rank == 2


@pytest.mark.parametrize("schedule,ranks,spr,mb,arg,why", [
    ("1F1B", 4, 1, 3, "microbatches=3", r"at least as many microbatches as stages \(ranks=4\)"),
    ("DualPipeV", 3, 2, 5, "microbatches=5", r"at least as many microbatches as stages"),
    ("Interleaved1F1B", 4, 2, 9, "microbatches=9", r"= 2 rounds .* multiple"),
    ("InterleavedZeroBubble", 2, 3, 5, "microbatches=5", r"= 2 rounds .* multiple"),
])
def test_refusal_messages_say_why(schedule, ranks, spr, mb, arg, why) -> None:
    with pytest.raises(ValueError, match=rf"{arg} is not allowed for {schedule}: .*{why}"):
        build_plan(schedule, ranks, mb, spr)
    assert torch_refusal(schedule, ranks, spr, mb) is not None
