"""ZB-V: zero bubble on a V, two stages per rank with the backward split into ``I`` and ``W``.

Source: Qi et al. 2024, "Zero Bubble Pipeline Parallelism" (ICLR 2024), section 6 (ZB-V).
Mirrors torch's ``ScheduleZBVZeroBubble``.

The ``2p`` stages run down the ranks and back up (V placement): rank ``r`` holds stage ``r``
(chunk 0) and stage ``2p - 1 - r`` (chunk 1), so rank 0 holds the first and the last stage and
the turn at the bottom needs no communication. Each rank warms up with chunk-0 forwards, then
chunk-1/chunk-0 forward pairs, then chunk-1 ``F I W`` triples; the steady state repeats
``F I W`` on chunk 0 then on chunk 1; the cool-down runs the remaining ``I``s and then the
pending ``W``s. With equal ``F``, ``I`` and ``W`` times the pipeline has no bubble once
``microbatches >= 2 * ranks - 1``: torch builds the order for ``max(2p - 1, microbatches)``
microbatches and leaves an idle step wherever a microbatch beyond the real ones would run.
torch needs exactly 2 stages per rank.
"""

from __future__ import annotations

from typing import Any

from distlab.pipeline_parallel.actions import Action, F, I, Kind, W
from distlab.pipeline_parallel.plan import PipelinePlan, Step
from distlab.pipeline_parallel.schedules._common import check_sizes, make_plan, refuse

NAME = "ZBVZeroBubble"
TORCH_CLASS = "ScheduleZBVZeroBubble"



def require_two_stages(schedule: str, torch_class: str, stages_per_rank: int) -> None:
    """V schedules hold exactly two stages per rank."""
    if stages_per_rank != 2:
        raise refuse(schedule, "stages_per_rank", stages_per_rank,
                     f"torch's {torch_class} places stages in a V, exactly 2 per rank, so "
                     "stages_per_rank must be 2")


def check(ranks: Any, stages_per_rank: Any, microbatches: Any) -> tuple[int, int, int]:
    """The arguments as ints, or the error torch's ``ScheduleZBVZeroBubble`` would give:
    ``stages_per_rank`` must be 2."""
    ranks, stages_per_rank, microbatches = check_sizes(NAME, ranks, stages_per_rank,
                                                       microbatches)
    require_two_stages(NAME, TORCH_CLASS, stages_per_rank)
    return ranks, stages_per_rank, microbatches


def _row(rank: int, ranks: int, microbatches: int) -> list[Step]:
    down, up = rank, 2 * ranks - 1 - rank  # chunk 0 and chunk 1
    padded = max(2 * ranks - 1, microbatches)
    count = {(down, F): 0, (up, F): 0, (down, I): 0, (up, I): 0, (down, W): 0, (up, W): 0}
    row: list[Action | None] = [None] * rank

    def run(stage: int, *kinds: Kind) -> None:
        for kind in kinds:
            # each kind numbers its own microbatches on each stage, in order
            row.append(Action(stage, kind, count[stage, kind]))
            count[stage, kind] += 1

    for _ in range(2 * (ranks - rank) - 1):
        run(down, F)
    for _ in range(rank):
        run(up, F)
        run(down, F)
    for _ in range(ranks - rank):
        run(up, F, I, W)
    while count[up, F] < count[down, F] or count[down, F] < padded:
        if count[down, F] < padded:
            run(down, F)
        run(down, I, W)
        run(up, F, I, W)
    for _ in range(rank):
        run(down, I)
        run(up, I)
    for _ in range(ranks - rank):
        run(down, I, W)
    while count[up, W] < count[up, I]:
        run(up, W)
    while count[down, W] < count[down, I]:
        run(down, W)
    # the padding microbatches (>= microbatches) become idle steps
    return [(a,) if a is not None and a.microbatch < microbatches else () for a in row]


def zbv_zero_bubble(ranks: int, stages_per_rank: int, microbatches: int) -> PipelinePlan:
    """The ZB-V plan."""
    ranks, stages_per_rank, microbatches = check(ranks, stages_per_rank, microbatches)
    rows = [_row(r, ranks, microbatches) for r in range(ranks)]
    return make_plan(NAME, ranks, stages_per_rank, microbatches, "v", rows)
