"""DualPipe-V: a V of two stages per rank, the forward of one microbatch overlapped with the
backward of another.

Source: DeepSeek-AI 2024, "DeepSeek-V3 Technical Report" (DualPipe), in its V-shaped,
single-direction variant from github.com/deepseek-ai/DualPipe. Mirrors torch's
``ScheduleDualPipeV``.

Rank ``r`` of ``p`` holds stage ``r`` (chunk 0, on the way down) and stage ``2p - 1 - r``
(chunk 1, on the way up). After a warm-up of forwards (and a few chunk-1 ``I``/``W`` pairs),
the main phase runs each step as one overlapped pair: the forward of one chunk beside the full
backward of the other (torch's ``OVERLAP_F_B``), so one's compute hides the other's
communication. The cool-down runs the remaining backwards, the second half of them split into
``I`` and ``W`` with the ``W``s filling the tail (zero-bubble style). torch needs exactly 2
stages per rank and ``microbatches >= 2 * ranks`` (at least as many microbatches as stages).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from distlab.pipeline_parallel.actions import Action, B, F, I, Kind, W
from distlab.pipeline_parallel.plan import PipelinePlan, Step
from distlab.pipeline_parallel.schedules._common import check_sizes, make_plan, refuse
from distlab.pipeline_parallel.schedules.zbv_zero_bubble import require_two_stages

NAME = "DualPipeV"
TORCH_CLASS = "ScheduleDualPipeV"



def check(ranks: Any, stages_per_rank: Any, microbatches: Any) -> tuple[int, int, int]:
    """The arguments as ints, or the error torch's ``ScheduleDualPipeV`` would give:
    ``stages_per_rank`` must be 2 and ``microbatches >= 2 * ranks``."""
    ranks, stages_per_rank, microbatches = check_sizes(NAME, ranks, stages_per_rank,
                                                       microbatches)
    require_two_stages(NAME, TORCH_CLASS, stages_per_rank)
    if microbatches < ranks * stages_per_rank:
        raise refuse(NAME, "microbatches", microbatches,
                     f"torch's {TORCH_CLASS} needs at least as many microbatches as stages "
                     f"(2 * ranks = {ranks * stages_per_rank})")
    return ranks, stages_per_rank, microbatches


class _Rank:
    """One rank's steps, numbering microbatches per stage as it goes."""

    def __init__(self, down: int, up: int) -> None:
        self.down, self.up = down, up
        self.forwards = {down: 0, up: 0}
        self.backwards = {down: 0, up: 0}  # B and I share the numbering
        self.weights: deque[Action] = deque()  # I's whose W is still to run, oldest first
        self.row: list[Step] = []

    def action(self, stage: int, kind: Kind) -> Action:
        counter = self.forwards if kind is F else self.backwards
        out = Action(stage, kind, counter[stage])
        counter[stage] += 1
        if kind is I:
            self.weights.append(out)
        return out

    def one(self, stage: int, kind: Kind) -> None:
        self.row.append((self.action(stage, kind),))

    def overlap(self, forward_stage: int, backward_stage: int) -> None:
        self.row.append((self.action(forward_stage, F), self.action(backward_stage, B)))

    def weight(self) -> None:
        """The oldest pending ``W``, if any."""
        if self.weights:
            done = self.weights.popleft()
            self.row.append((Action(done.stage, W, done.microbatch),))


def _row(rank: int, ranks: int, microbatches: int) -> list[Step]:
    r = _Rank(rank, 2 * ranks - 1 - rank)
    down, up = r.down, r.up
    for _ in range(2 * (ranks - rank - 1)):
        r.one(down, F)
    for _ in range(rank + 1):
        r.one(down, F)
        r.one(up, F)
    for _ in range(ranks - rank - 1):
        r.one(up, I)
        r.weight()
        r.one(up, F)
    for i in range(microbatches - 2 * ranks + rank + 1):
        if i == 0 and rank == ranks - 1:  # the bottom of the V: run apart, a smaller bubble
            r.one(down, F)
            r.one(up, B)
        else:
            r.overlap(down, up)
        r.overlap(up, down)
    for _ in range(ranks - rank - 1):
        r.one(up, B)
        r.overlap(up, down)
    # the last rank + 1 backward pairs: the second half split into I (now) and W (later)
    half = (rank + 1) // 2
    split = False
    for i in range(rank + 1):
        if i == half and rank % 2 == 1:
            split = True
        r.one(up, I if split else B)
        if i == half and rank % 2 == 0:
            split = True
        r.one(down, I if split else B)
    for _ in range(ranks - rank - 1):
        r.weight()
        r.one(down, I if split else B)
    for _ in range(rank + 1):
        r.weight()
    return r.row


def dualpipe_v(ranks: int, stages_per_rank: int, microbatches: int) -> PipelinePlan:
    """The DualPipe-V plan."""
    ranks, stages_per_rank, microbatches = check(ranks, stages_per_rank, microbatches)
    rows = [_row(r, ranks, microbatches) for r in range(ranks)]
    return make_plan(NAME, ranks, stages_per_rank, microbatches, "v", rows)
