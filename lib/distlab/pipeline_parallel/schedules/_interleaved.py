"""The looped, interleaved 1F1B family shared by Interleaved 1F1B and Interleaved Zero Bubble.

Microbatches go in rounds of ``per_round`` (torch: ``rounds = max(1, microbatches // ranks)``,
``per_round = microbatches // rounds``, refused unless ``rounds`` divides ``microbatches``). A
rank's ``spr * microbatches`` forwards visit its stages round by round: ``per_round`` forwards
on its first stage, ``per_round`` on its second, ... and around again; its backwards do the same
from its last stage down. After a warm-up of forwards, each forward is paired with a backward,
then the remaining backwards drain.
"""

from __future__ import annotations

from collections import deque

from distlab.pipeline_parallel.actions import Action, Kind
from distlab.pipeline_parallel.plan import Step
from distlab.pipeline_parallel.schedules._common import refuse


def rounds(microbatches: int, ranks: int) -> tuple[int, int]:
    """``(rounds, per_round)`` as torch splits the microbatches."""
    count = max(1, microbatches // ranks)
    return count, microbatches // count


def check_rounds(schedule: str, torch_class: str, ranks: int, microbatches: int) -> None:
    """torch's rule for the interleaved schedules: ``max(1, microbatches // ranks)`` rounds must
    divide ``microbatches``."""
    count, _ = rounds(microbatches, ranks)
    if microbatches % count:
        raise refuse(schedule, "microbatches", microbatches,
                     f"torch's {torch_class} splits microbatches into max(1, microbatches // "
                     f"ranks) = {count} rounds (ranks={ranks}) and needs microbatches to be a "
                     f"multiple of that")


def rank_row(rank: int, ranks: int, stages_per_rank: int, microbatches: int, *,
             zero_bubble: bool) -> list[Step]:
    """Rank ``rank``'s steps, before any re-timing.

    ``zero_bubble=False`` (Interleaved 1F1B): a warm-up of ``(spr - 1) * per_round + 2 * hops``
    forwards (``hops = ranks - 1 - rank``, capped at all of them), idle steps until the first
    gradient can be back (two per hop), then forward/backward pairs, then the remaining
    backwards each after an idle step. ``zero_bubble=True`` (Interleaved Zero Bubble): a warm-up
    of ``(spr - 1) * per_round + hops`` forwards, ``hops`` idle steps, every backward an ``I``
    whose ``W`` runs right after a later ``I`` (the rank's first ``rank`` ``W``s are held back
    that way) or, for those still pending, at the end; no idle steps in the cool-down.
    """
    _, per_round = rounds(microbatches, ranks)
    factor = 1 if zero_bubble else 2
    total = stages_per_rank * microbatches
    warmup = min((stages_per_rank - 1) * per_round + factor * (ranks - 1 - rank), total)
    if zero_bubble:
        wait = ranks - 1 - rank
    else:  # until the first backward can start: all forwards of one lap, 2 steps a hop back
        wait = stages_per_rank * ranks + 2 * (ranks - 1 - rank) - (warmup + rank)
    backward_kind = Kind.BACKWARD_INPUT if zero_bubble else Kind.FULL_BACKWARD

    def forward_stage(op: int) -> int:
        return (op // per_round) % stages_per_rank * ranks + rank

    def backward_stage(op: int) -> int:
        lap = (op - warmup) // per_round % stages_per_rank
        return (stages_per_rank - 1 - lap) * ranks + rank

    next_mb: dict[tuple[int, Kind], int] = {}

    def take(stage: int, kind: Kind) -> Action:
        mb = next_mb.get((stage, kind), 0)
        next_mb[stage, kind] = mb + 1
        return Action(stage, kind, mb)

    row: list[Step] = [()] * rank
    pending: deque[Action] = deque()  # I's whose W is still to run, oldest first
    backwards = 0

    def backward(op: int) -> None:
        nonlocal backwards
        action = take(backward_stage(op), backward_kind)
        row.append((action,))
        backwards += 1
        if zero_bubble:
            pending.append(action)
            if backwards > rank:  # the first `rank` backwards keep their W for later
                done = pending.popleft()
                row.append((Action(done.stage, Kind.BACKWARD_WEIGHT, done.microbatch),))

    for op in range(total + warmup):
        if op < warmup:
            row.append((take(forward_stage(op), Kind.FORWARD),))
            if op == warmup - 1:
                row.extend([()] * max(0, wait))
        elif op < total:
            row.append((take(forward_stage(op), Kind.FORWARD),))
            backward(op)
        else:
            if not zero_bubble:
                row.append(())
            backward(op)
    while pending:
        done = pending.popleft()
        row.append((Action(done.stage, Kind.BACKWARD_WEIGHT, done.microbatch),))
    return row
