"""Interleaved Zero Bubble: interleaved 1F1B with each backward split into ``I`` and ``W``.

Source: Qi et al. 2024, "Zero Bubble Pipeline Parallelism" (ICLR 2024; the ZB1P schedule,
looped over several stages per rank). Mirrors torch's ``ScheduleInterleavedZeroBubble``.

The backward of a stage is split into ``I`` (the gradient to its input, which the previous
stage is waiting for) and ``W`` (its weights' gradient, which nobody waits for). The order is
interleaved 1F1B's with a warm-up one forward shorter per hop and every backward an ``I``; rank
``r`` keeps ``r`` ``W``s pending (the oldest runs right after each later ``I``) and runs the
rest at the end, so ``W`` fills the slots where 1F1B idles. A final
pass delays a forward (an idle step) until the previous stage's forward of that microbatch ran
in an earlier step, as torch's ``_add_bubbles_to_actions`` does; like torch, it does not check
``I`` against the next stage's ``I``. Microbatch rounds as for Interleaved 1F1B.
"""

from __future__ import annotations

from typing import Any

from distlab.pipeline_parallel.actions import Kind
from distlab.pipeline_parallel.plan import PipelinePlan, Step
from distlab.pipeline_parallel.schedules._common import check_sizes, make_plan
from distlab.pipeline_parallel.schedules._interleaved import check_rounds, rank_row

NAME = "InterleavedZeroBubble"
TORCH_CLASS = "ScheduleInterleavedZeroBubble"


def check(ranks: Any, stages_per_rank: Any, microbatches: Any) -> tuple[int, int, int]:
    """The arguments as ints, or the error torch's ``ScheduleInterleavedZeroBubble`` would
    give: ``max(1, microbatches // ranks)`` must divide ``microbatches``."""
    ranks, stages_per_rank, microbatches = check_sizes(NAME, ranks, stages_per_rank,
                                                       microbatches)
    check_rounds(NAME, TORCH_CLASS, ranks, microbatches)
    return ranks, stages_per_rank, microbatches


def _delay_forwards(rows: list[list[Step]]) -> list[list[Step]]:
    """Re-time ``rows`` in lockstep: a rank's next forward waits (an idle step) until the
    previous stage ran the same microbatch's forward at an earlier step; idle steps stay."""
    ran: set[tuple[int, int]] = set()  # (stage, microbatch) forwards run at earlier steps
    pos = [0] * len(rows)
    out: list[list[Step]] = [[] for _ in rows]
    while any(p < len(row) for p, row in zip(pos, rows, strict=True)):
        now: list[tuple[int, int]] = []
        moved = False
        for rank, row in enumerate(rows):
            if pos[rank] >= len(row):
                continue
            step = row[pos[rank]]
            if step:
                (action,) = step
                if (action.kind is Kind.FORWARD and action.stage > 0
                        and (action.stage - 1, action.microbatch) not in ran):
                    out[rank].append(())
                    continue
                if action.kind is Kind.FORWARD:
                    now.append((action.stage, action.microbatch))
            out[rank].append(step)
            pos[rank] += 1
            moved = True
        if not moved:
            raise AssertionError("the forwards wait on each other forever")
        ran.update(now)
    return out


def interleaved_zero_bubble(ranks: int, stages_per_rank: int, microbatches: int) -> PipelinePlan:
    """The Interleaved Zero Bubble (ZB1P) plan."""
    ranks, stages_per_rank, microbatches = check(ranks, stages_per_rank, microbatches)
    rows = [rank_row(r, ranks, stages_per_rank, microbatches, zero_bubble=True)
            for r in range(ranks)]
    return make_plan(NAME, ranks, stages_per_rank, microbatches, "loop", _delay_forwards(rows))
