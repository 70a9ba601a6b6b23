"""Interleaved 1F1B: 1F1B over several looped stages per rank, earlier microbatch first.

Source: Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters
Using Megatron-LM" (the interleaved schedule). Mirrors torch's ``ScheduleInterleaved1F1B``.

Rank ``r`` of ``p`` holds stages ``r, r + p, ...``. Microbatches go in rounds (torch's relaxed
form of the paper's ``microbatches % ranks == 0``: ``max(1, microbatches // ranks)`` rounds
that must divide ``microbatches``); a rank runs a round's forwards on its first stage, then on
its next stage, and so on (depth first: an earlier microbatch goes deeper before a later one
starts). After a warm-up it pairs each forward with a backward (1F1B), then drains. Each
extra stage per rank shrinks the bubble by that factor at the cost of more communication.
torch's grid keeps ranks in lockstep with idle steps: two for each hop the first gradient
climbs back, one before each cool-down backward.
"""

from __future__ import annotations

from typing import Any

from distlab.pipeline_parallel.plan import PipelinePlan
from distlab.pipeline_parallel.schedules._common import check_sizes, make_plan
from distlab.pipeline_parallel.schedules._interleaved import check_rounds, rank_row

NAME = "Interleaved1F1B"
TORCH_CLASS = "ScheduleInterleaved1F1B"


def check(ranks: Any, stages_per_rank: Any, microbatches: Any) -> tuple[int, int, int]:
    """The arguments as ints, or the error torch's ``ScheduleInterleaved1F1B`` would give:
    ``max(1, microbatches // ranks)`` must divide ``microbatches``."""
    ranks, stages_per_rank, microbatches = check_sizes(NAME, ranks, stages_per_rank,
                                                       microbatches)
    check_rounds(NAME, TORCH_CLASS, ranks, microbatches)
    return ranks, stages_per_rank, microbatches


def interleaved_1f1b(ranks: int, stages_per_rank: int, microbatches: int) -> PipelinePlan:
    """The Interleaved 1F1B plan."""
    ranks, stages_per_rank, microbatches = check(ranks, stages_per_rank, microbatches)
    rows = [rank_row(r, ranks, stages_per_rank, microbatches, zero_bubble=False)
            for r in range(ranks)]
    return make_plan(NAME, ranks, stages_per_rank, microbatches, "loop", rows)
