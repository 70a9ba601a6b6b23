"""Shared pieces of the schedule builders: argument checks and the unit-time grid.

Every builder checks its arguments here first (ints, ``ranks >= 1``, ``microbatches >= 1``, the
stages per rank it allows) and then applies the refusals of the torch class it mirrors, so a
combination torch would not build is refused with a ``ValueError`` that names the argument, its
value and torch's rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from distlab._checks import check_int
from distlab.pipeline_parallel.actions import Action, Kind
from distlab.pipeline_parallel.plan import PipelinePlan, Step, Style, stage_to_rank


def check_sizes(schedule: str, ranks: Any, stages_per_rank: Any,
                microbatches: Any) -> tuple[int, int, int]:
    """``(ranks, stages_per_rank, microbatches)`` as ints >= 1 (``TypeError`` for a non-int,
    bools included; ``ValueError`` below 1), each message naming the argument and the
    schedule."""
    out = []
    for name, value in (("ranks", ranks), ("stages_per_rank", stages_per_rank),
                        ("microbatches", microbatches)):
        try:
            out.append(check_int(name, value, minimum=1))
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{schedule}: {exc}") from None
    return out[0], out[1], out[2]


def refuse(schedule: str, name: str, value: int, why: str) -> ValueError:
    """The ``ValueError`` for a combination torch refuses: names the argument, its value, the
    schedule and torch's rule (``why``)."""
    return ValueError(f"{name}={value} is not allowed for {schedule}: {why}")


def require_single_stage(schedule: str, torch_class: str, stages_per_rank: int) -> None:
    """Single-stage schedules (GPipe, 1F1B) hold exactly one stage per rank."""
    if stages_per_rank != 1:
        raise refuse(schedule, "stages_per_rank", stages_per_rank,
                     f"torch's {torch_class} runs one stage per rank, so stages_per_rank must "
                     "be 1")


def _key(action: Action) -> tuple[int, str, int]:
    """What an action leaves behind for others: the forward output, the input gradient (``B``
    or ``I``) or the weight gradient (``W``)."""
    if action.kind is Kind.FORWARD:
        tag = "F"
    elif action.kind in (Kind.FULL_BACKWARD, Kind.BACKWARD_INPUT):
        tag = "grad"
    else:
        tag = "W"
    return action.stage, tag, action.microbatch


def _needs(action: Action, num_stages: int) -> list[tuple[int, str, int]]:
    s, m = action.stage, action.microbatch
    if action.kind is Kind.FORWARD:
        return [(s - 1, "F", m)] if s > 0 else []
    if action.kind is Kind.BACKWARD_WEIGHT:
        return [(s, "grad", m)]
    needs = [(s, "F", m)]
    if s < num_stages - 1:
        needs.append((s + 1, "grad", m))
    return needs


def asap_grid(num_stages: int, orders: Sequence[Sequence[Action]]) -> tuple[tuple[Step, ...], ...]:
    """Place each rank's compute ``orders`` on unit time steps, as early as possible.

    Every action takes one step; a rank runs its next action at the first step after all the
    actions it depends on (:meth:`PipelinePlan.dependencies`) have run, and idles (``()``)
    until then. Used for the single-stage schedules, where torch fixes only the order.

    Raises:
        ValueError: the orders deadlock (some action waits on one that never runs first).
    """
    done: dict[tuple[int, str, int], int] = {}
    pos = [0] * len(orders)
    rows: list[list[Step]] = [[] for _ in orders]
    t = 0
    while any(p < len(o) for p, o in zip(pos, orders, strict=True)):
        ran: list[Action] = []
        for rank, order in enumerate(orders):
            if pos[rank] >= len(order):
                continue
            action = order[pos[rank]]
            if all(done.get(k, t) < t for k in _needs(action, num_stages)):
                rows[rank].append((action,))
                ran.append(action)
                pos[rank] += 1
            else:
                rows[rank].append(())
        if not ran:
            stuck = {r: str(order[pos[r]]) for r, order in enumerate(orders)
                     if pos[r] < len(order)}
            raise ValueError(f"the compute orders deadlock at step {t}; waiting: {stuck}")
        for action in ran:
            done[_key(action)] = t
        t += 1
    for row in rows:  # a finished rank does not idle at the end
        while row and row[-1] == ():
            row.pop()
    return tuple(tuple(row) for row in rows)


def steps(items: Iterable[Action | tuple[Action, ...] | None]) -> tuple[Step, ...]:
    """A rank's row from a list of torch-like entries: ``None`` idle, an action, or a tuple of
    overlapped actions."""
    out: list[Step] = []
    for item in items:
        if item is None:
            out.append(())
        elif isinstance(item, Action):
            out.append((item,))
        else:
            out.append(tuple(item))
    return tuple(out)


def make_plan(schedule: str, ranks: int, stages_per_rank: int, microbatches: int, style: Style,
              rows: Sequence[Sequence[Step]]) -> PipelinePlan:
    """A :class:`PipelinePlan` from its rows, checking each action sits on its stage's rank."""
    for rank, row in enumerate(rows):
        for step in row:
            for a in step:
                if stage_to_rank(a.stage, ranks, stages_per_rank, style) != rank:
                    raise AssertionError(f"{schedule}: {a} placed on rank {rank}")
    return PipelinePlan(schedule=schedule, ranks=ranks, stages_per_rank=stages_per_rank,
                        microbatches=microbatches, style=style,
                        grid=tuple(tuple(row) for row in rows))
