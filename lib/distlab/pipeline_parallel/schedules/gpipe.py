"""GPipe: every forward, then every backward (fill and drain).

Source: Huang et al. 2019, "GPipe: Efficient Training of Giant Neural Networks using Pipeline
Parallelism". Mirrors torch's ``ScheduleGPipe`` (one stage per rank).

Each rank runs the forwards of all microbatches in order, then their full backwards in the same
order (torch's ``_step_microbatches``). Simple, but every rank holds the activations of all
microbatches until its backwards start, and the pipeline fills and drains once per step: the
bubble is ``(ranks - 1)`` steps each way. torch fixes only each rank's order; the plan places
it on unit time steps as early as the dependencies allow.
"""

from __future__ import annotations

from typing import Any

from distlab.pipeline_parallel.actions import Action, Kind
from distlab.pipeline_parallel.plan import PipelinePlan
from distlab.pipeline_parallel.schedules._common import (
    asap_grid,
    check_sizes,
    make_plan,
    require_single_stage,
)

NAME = "GPipe"
TORCH_CLASS = "ScheduleGPipe"


def check(ranks: Any, stages_per_rank: Any, microbatches: Any) -> tuple[int, int, int]:
    """The arguments as ints, or the error torch's ``ScheduleGPipe`` would give (GPipe takes
    any ``ranks >= 1`` and ``microbatches >= 1``, one stage per rank)."""
    ranks, stages_per_rank, microbatches = check_sizes(NAME, ranks, stages_per_rank,
                                                       microbatches)
    require_single_stage(NAME, TORCH_CLASS, stages_per_rank)
    return ranks, stages_per_rank, microbatches


def gpipe(ranks: int, stages_per_rank: int, microbatches: int) -> PipelinePlan:
    """The GPipe plan: on every rank (= stage) ``F0 .. F(m-1)`` then ``B0 .. B(m-1)``."""
    ranks, stages_per_rank, microbatches = check(ranks, stages_per_rank, microbatches)
    orders = [[Action(r, Kind.FORWARD, m) for m in range(microbatches)]
              + [Action(r, Kind.FULL_BACKWARD, m) for m in range(microbatches)]
              for r in range(ranks)]
    return make_plan(NAME, ranks, stages_per_rank, microbatches, "loop",
                     asap_grid(ranks, orders))
