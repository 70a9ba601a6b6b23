"""A pipeline schedule as data: :class:`PipelinePlan`, each rank's compute actions in time steps.

A plan holds, for every rank, the compute actions (``F``, ``B``, ``I``, ``W``; see
:mod:`.actions`) in the order that rank runs them, on torch's grid of unit time steps: each step
holds no action (the rank idles), one, or two that run overlapped (DualPipe-V's forward of one
microbatch beside the backward of another, torch's ``OVERLAP_F_B``). torch's
``pipeline_order`` IR uses the same grid. The sends and
receives between ranks follow from the compute order and the stage-to-rank map
(:meth:`PipelinePlan.rank_actions`), so the compute order is the one source of truth; it is
drawn, simulated, costed and run from there.

Stages sit on ranks in one of two styles (torch's ``generate_stage_to_rank_mapping``):
``"loop"`` puts stage ``s`` on rank ``s % ranks``; ``"v"`` runs down the ranks and back up, so
rank 0 holds the first and the last stage (ZB-V, DualPipe-V).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

from distlab.pipeline_parallel.actions import Action, Kind

Style = Literal["loop", "v"]
Step = tuple[Action, ...]
"""The compute actions of one rank at one time step: ``()`` idle, one, or two overlapped."""


def stage_to_rank(stage: int, ranks: int, stages_per_rank: int, style: Style) -> int:
    """The rank that holds ``stage`` (0 <= stage < ranks * stages_per_rank)."""
    num_stages = ranks * stages_per_rank
    if not 0 <= stage < num_stages:
        raise ValueError(f"stage={stage} is outside 0..{num_stages - 1}")
    if style == "loop":
        return stage % ranks
    if style == "v":
        lap, offset = divmod(stage, ranks)
        return offset if lap % 2 == 0 else ranks - 1 - offset
    raise ValueError(f"style={style!r}; allowed: 'loop', 'v'")


@dataclass(frozen=True)
class PipelinePlan:
    """Each rank's compute actions of one pipeline-parallel step, on a grid of time steps.

    Attributes:
        schedule: the schedule's name, torch's spelling without ``Schedule`` (``"1F1B"``).
        ranks: pipeline ranks.
        stages_per_rank: model stages each rank holds (1 for GPipe and 1F1B).
        microbatches: microbatches the batch is split into.
        style: how stages sit on ranks, ``"loop"`` or ``"v"``.
        grid: ``grid[rank][t]`` is the :data:`Step` rank runs at time step ``t``.
    """

    schedule: str
    ranks: int
    stages_per_rank: int
    microbatches: int
    style: Style
    grid: tuple[tuple[Step, ...], ...]

    @property
    def num_stages(self) -> int:
        """Model stages in all: ``ranks * stages_per_rank``."""
        return self.ranks * self.stages_per_rank

    @property
    def splits_backward(self) -> bool:
        """True where the backward runs as ``I`` then ``W`` (zero-bubble schedules)."""
        return any(a.kind is Kind.BACKWARD_WEIGHT for row in self.grid for step in row
                   for a in step)

    def rank_of(self, stage: int) -> int:
        """The rank that holds ``stage``."""
        return stage_to_rank(stage, self.ranks, self.stages_per_rank, self.style)

    def stages_of(self, rank: int) -> tuple[int, ...]:
        """The stages ``rank`` holds, in increasing order."""
        return tuple(s for s in range(self.num_stages) if self.rank_of(s) == rank)

    def compute(self, rank: int) -> tuple[Action, ...]:
        """``rank``'s compute actions in the order it runs them (idle steps left out, an
        overlapped step's actions in their order)."""
        return tuple(a for step in self.grid[rank] for a in step)

    def all_compute(self) -> Iterator[tuple[int, Action]]:
        """``(rank, action)`` for every compute action of every rank."""
        for rank in range(self.ranks):
            for action in self.compute(rank):
                yield rank, action

    @cached_property
    def backward_kind(self) -> dict[tuple[int, int], Kind]:
        """``(stage, microbatch) -> B or I``: the action that sends the input gradient back."""
        return {(a.stage, a.microbatch): a.kind for _, a in self.all_compute()
                if a.kind in (Kind.FULL_BACKWARD, Kind.BACKWARD_INPUT)}

    def dependencies(self, action: Action) -> tuple[Action, ...]:
        """The compute actions that must finish before ``action`` can start.

        ``F(s, m)`` needs ``F(s - 1, m)``; the backward (``B`` or ``I``) of ``(s, m)`` needs
        ``F(s, m)`` and the backward of ``(s + 1, m)``; ``W(s, m)`` needs ``I(s, m)``.
        """
        s, m = action.stage, action.microbatch
        if action.kind is Kind.FORWARD:
            return (Action(s - 1, Kind.FORWARD, m),) if s > 0 else ()
        if action.kind in (Kind.FULL_BACKWARD, Kind.BACKWARD_INPUT):
            needs = [Action(s, Kind.FORWARD, m)]
            if s < self.num_stages - 1:
                kind = self.backward_kind.get((s + 1, m), Kind.FULL_BACKWARD)
                needs.append(Action(s + 1, kind, m))
            return tuple(needs)
        if action.kind is Kind.BACKWARD_WEIGHT:
            return (Action(s, Kind.BACKWARD_INPUT, m),)
        raise ValueError(f"{action} is not a compute action")

    def rank_actions(self, rank: int) -> tuple[Action, ...]:
        """``rank``'s actions with the sends and receives its compute order implies.

        Before a compute action come the receives it needs from another rank (``RECV_F`` for a
        forward whose input comes from the previous stage, ``RECV_B`` for a backward whose
        output gradient comes from the next stage); after it the sends it owes (``SEND_F`` after
        a forward whose next stage is on another rank, ``SEND_B`` after the ``B`` or ``I`` of a
        stage whose previous stage is). Stages on the same rank hand tensors over in memory.
        """
        out: list[Action] = []
        last = self.num_stages - 1
        for a in self.compute(rank):
            s, m = a.stage, a.microbatch
            if a.kind is Kind.FORWARD:
                if s > 0 and self.rank_of(s - 1) != rank:
                    out.append(Action(s, Kind.RECV_F, m))
                out.append(a)
                if s < last and self.rank_of(s + 1) != rank:
                    out.append(Action(s, Kind.SEND_F, m))
            elif a.kind in (Kind.FULL_BACKWARD, Kind.BACKWARD_INPUT):
                if s < last and self.rank_of(s + 1) != rank:
                    out.append(Action(s, Kind.RECV_B, m))
                out.append(a)
                if s > 0 and self.rank_of(s - 1) != rank:
                    out.append(Action(s, Kind.SEND_B, m))
            else:
                out.append(a)
        return tuple(out)

    def format(self) -> str:
        """The grid as a table, one column per rank, one row per time step (torch's layout)."""
        def cell(step: Step) -> str:
            return "+".join(str(a) for a in step)

        width = max([len(cell(step)) for row in self.grid for step in row] + [6])
        steps = max((len(row) for row in self.grid), default=0)
        head = "step  " + " ".join(f"rank {r}".ljust(width) for r in range(self.ranks))
        lines = [head.rstrip()]
        for t in range(steps):
            cells = [cell(row[t]) if t < len(row) else "" for row in self.grid]
            lines.append((f"{t:<5} " + " ".join(c.ljust(width) for c in cells)).rstrip())
        return "\n".join(lines)

