"""Looped BFS: several looped stages per rank, each stage's microbatches all at once.

Source: Lamy-Poirier 2023, "Breadth-First Pipeline Parallelism". Mirrors torch's
``ScheduleLoopedBFS``.

Rank ``r`` of ``p`` holds stages ``r, r + p, r + 2p, ...`` (looped placement). It runs the
forwards of its stages in increasing stage order, every microbatch of a stage before the next
stage (breadth first: the earlier stage first), then, after waiting for the first gradient to
come back, the backwards of its stages in decreasing stage order, each stage's microbatches
last to first. Like GPipe over a longer, looped pipeline: fewer idle steps per stage, with all
microbatches' activations held at once. torch builds it for any sizes.
"""

from __future__ import annotations

from typing import Any

from distlab.pipeline_parallel.actions import Action, Kind
from distlab.pipeline_parallel.plan import PipelinePlan, Step
from distlab.pipeline_parallel.schedules._common import check_sizes, make_plan

NAME = "LoopedBFS"
TORCH_CLASS = "ScheduleLoopedBFS"


def check(ranks: Any, stages_per_rank: Any, microbatches: Any) -> tuple[int, int, int]:
    """The arguments as ints (torch's ``ScheduleLoopedBFS`` takes any sizes >= 1)."""
    return check_sizes(NAME, ranks, stages_per_rank, microbatches)


def _row(rank: int, ranks: int, stages_per_rank: int, microbatches: int) -> list[Step]:
    own = [rank + k * ranks for k in range(stages_per_rank)]
    row: list[Step] = [()] * rank  # the first forward reaches rank r after r steps
    for stage in own:
        row += [(Action(stage, Kind.FORWARD, m),) for m in range(microbatches)]
    row += [()] * (2 * (ranks - 1 - rank))  # the first gradient climbs back 2 steps a hop
    for stage in reversed(own):
        row += [(Action(stage, Kind.FULL_BACKWARD, m),) for m in reversed(range(microbatches))]
    return row


def looped_bfs(ranks: int, stages_per_rank: int, microbatches: int) -> PipelinePlan:
    """The Looped BFS plan."""
    ranks, stages_per_rank, microbatches = check(ranks, stages_per_rank, microbatches)
    rows = [_row(r, ranks, stages_per_rank, microbatches) for r in range(ranks)]
    return make_plan(NAME, ranks, stages_per_rank, microbatches, "loop", rows)
