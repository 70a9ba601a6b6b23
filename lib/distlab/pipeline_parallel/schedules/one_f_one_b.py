"""1F1B: a short warm-up of forwards, then one forward and one backward in turn.

Source: Narayanan et al. 2021, "Memory-Efficient Pipeline-Parallel DNN Training"
(PipeDream-Flush). Mirrors torch's ``Schedule1F1B`` (one stage per rank).

Stage ``s`` of ``n`` first runs ``min(microbatches, n - s)`` forwards (the last stage one, the
first stage ``n``), then alternates a backward (oldest microbatch first) with the next forward
until the forwards run out, then runs the remaining backwards. A rank so holds at most
``n - s`` microbatches' activations, against all of them for GPipe, with the same bubble.
The order is the one torch's ``_step_microbatches`` runs; the plan places it on unit time
steps as early as the dependencies allow. torch needs ``microbatches >= ranks``.
"""

from __future__ import annotations

from typing import Any

from distlab.pipeline_parallel.actions import Action, Kind
from distlab.pipeline_parallel.plan import PipelinePlan
from distlab.pipeline_parallel.schedules._common import (
    asap_grid,
    check_sizes,
    make_plan,
    refuse,
    require_single_stage,
)

NAME = "1F1B"
TORCH_CLASS = "Schedule1F1B"


def check(ranks: Any, stages_per_rank: Any, microbatches: Any) -> tuple[int, int, int]:
    """The arguments as ints, or the error torch's ``Schedule1F1B`` would give: one stage per
    rank and ``microbatches >= ranks`` (torch: at least as many microbatches as stages)."""
    ranks, stages_per_rank, microbatches = check_sizes(NAME, ranks, stages_per_rank,
                                                       microbatches)
    require_single_stage(NAME, TORCH_CLASS, stages_per_rank)
    if microbatches < ranks:
        raise refuse(NAME, "microbatches", microbatches,
                     f"torch's {TORCH_CLASS} needs at least as many microbatches as stages "
                     f"(ranks={ranks})")
    return ranks, stages_per_rank, microbatches


def _order(stage: int, num_stages: int, microbatches: int) -> list[Action]:
    warmup = min(microbatches, num_stages - stage)
    out = [Action(stage, Kind.FORWARD, m) for m in range(warmup)]
    forward, backward = warmup, 0
    while backward < microbatches:
        out.append(Action(stage, Kind.FULL_BACKWARD, backward))
        backward += 1
        if forward < microbatches:
            out.append(Action(stage, Kind.FORWARD, forward))
            forward += 1
    return out


def one_f_one_b(ranks: int, stages_per_rank: int, microbatches: int) -> PipelinePlan:
    """The 1F1B plan (rank ``r`` holds stage ``r``)."""
    ranks, stages_per_rank, microbatches = check(ranks, stages_per_rank, microbatches)
    orders = [_order(r, ranks, microbatches) for r in range(ranks)]
    return make_plan(NAME, ranks, stages_per_rank, microbatches, "loop",
                     asap_grid(ranks, orders))
