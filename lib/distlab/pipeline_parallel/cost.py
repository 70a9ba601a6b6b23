"""What a pipeline plan costs without running it: the bubble's closed forms, the microbatches in
flight (activation memory) and the bytes each rank sends.

Closed forms of the bubble
--------------------------
Take ``p`` ranks, ``m`` microbatches, ``v`` stages per rank, every stage alike: a forward takes
``f`` seconds and a full backward ``b`` seconds on each stage (``b = i + w`` where the backward is
split), transfers cost nothing. A rank computes ``v m (f + b)`` seconds per step.

- **GPipe** (Huang et al. 2019). The first microbatch reaches the last stage after ``(p - 1) f``;
  the last stage then runs its ``m`` forwards and ``m`` backwards back to back, and the last
  backward walks down ``p - 1`` stages: step ``= (m + p - 1)(f + b)``. Every rank computes
  ``m (f + b)``, so the bubble ``= (p - 1)(f + b) / ((m + p - 1)(f + b))``

      ``bubble = (p - 1) / (m + p - 1)``

  for every ``m >= 1`` and **every ratio** ``b / f`` (``f + b`` cancels: ``B = 2F`` is not
  needed).
- **1F1B** (PipeDream-Flush, Narayanan et al. 2021) reorders GPipe's work on each rank without
  shortening its critical path (the first forward down, the last backward up): the same
  ``(p - 1) / (m + p - 1)``, for every ratio ``b / f``; torch needs ``m >= p``.
- **Interleaved 1F1B** (Narayanan et al. 2021, section 2.2) with ``v`` stages per rank: each
  stage is a ``1/v`` share of a rank's layers, so the fill and the drain pass ``p - 1`` stage
  boundaries that cost ``(f + b) / v`` each (here ``f`` and ``b`` are one *rank's* times; in the
  per-stage times this module and :mod:`.simulate` take, ``f`` and ``b`` are one stage's, and
  the rank's are ``v f`` and ``v b``). The bubble time is ``(p - 1)(f + b)`` per-stage units
  against ``v m (f + b)`` of work:

      ``bubble = (p - 1) / (v m + p - 1)``

  again for every ratio ``b / f``, where ``m >= p`` (or ``v = 1``). With
  ``m < p`` and ``v > 1`` a rank runs out of microbatches before the first one returns from the
  last rank, every stage round adds a gap, and :func:`bubble_fraction` returns ``None``.
- **Looped BFS** (Lamy-Poirier 2023, "Breadth-First Pipeline Parallelism"): each rank runs all
  ``m`` forwards of one of its stages, then of the next; with ``m >= p`` the first microbatch of
  a later stage is back from the last rank before the rank needs it, so no bubble opens between
  stages and the step is ``(v m + p - 1)(f + b)``: the same ``(p - 1) / (v m + p - 1)`` for
  ``m >= p`` (or ``v = 1``: GPipe), and ``None`` otherwise, as for Interleaved1F1B.
- **Zero-bubble and DualPipe-V schedules** (InterleavedZeroBubble, ZBVZeroBubble, DualPipeV)
  fill the bubbles with the weight gradients ``W``, so their bubble depends on ``f``, ``i`` and
  ``w`` and on torch's exact order of them; the papers' forms hold for their own orders and
  time ratios, not for torch's, so :func:`bubble_fraction` returns ``None`` and
  :func:`distlab.pipeline_parallel.simulate.simulate` is the answer there.

Where the closed forms stop holding: stages of unequal times (the slowest stage sets the pace:
:meth:`~distlab.pipeline_parallel.simulate.StageTimes.with_imbalance`), and transfers that cost
time (each of the ``2 (p - 1)`` boundary crossings of the critical path adds its transfer). The
tests compare the closed forms with the simulation of the registry's plans, equal stages, free
transfers, within ``1e-9`` relative.

Microbatches in flight
----------------------
A stage holds a microbatch's activations from its forward ``F`` until they are released: by the
full backward ``B``, or, where the backward is split, by the weight gradient ``W``
(``released_by="W"``, the default: ``W`` needs each layer's input, which the activations hold,
and torch's pipelining keeps the stage's saved tensors until the weight gradient has run) or
already by the input gradient ``I`` (``released_by="I"``: what ``I`` alone needs is freed there,
as the zero-bubble paper counts it, the small rest kept for ``W`` not counted). Within one grid
step, the forwards are counted before the releases (an overlapped ``F`` and ``B`` hold both at
once). Counts come from the plan's order alone, never from times.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from distlab._checks import check_choice, check_int
from distlab.pipeline_parallel.actions import Action, Kind
from distlab.pipeline_parallel.plan import PipelinePlan
from distlab.pipeline_parallel.simulate import boundary_bytes

__all__ = ["CLOSED_FORM_SCHEDULES", "Released", "RankTraffic", "activation_bytes",
           "bubble_fraction", "closed_form_step_s", "grid_bubble_fraction", "in_flight",
           "peak_in_flight", "traffic"]

Released = Literal["W", "I"]

#: The schedules :func:`bubble_fraction` has a closed form for (where its conditions hold).
CLOSED_FORM_SCHEDULES = ("GPipe", "1F1B", "Interleaved1F1B", "LoopedBFS")


def _checked(schedule: Any, ranks: Any, microbatches: Any,
             stages_per_rank: Any) -> tuple[str, int, int, int]:
    from distlab.pipeline_parallel.schedules.registry import check_combination

    return check_combination(schedule, ranks, microbatches, stages_per_rank)


def bubble_fraction(schedule: str, ranks: int, microbatches: int,
                    stages_per_rank: int | None = None) -> float | None:
    """The closed-form bubble fraction of ``schedule`` with equal stages and free transfers
    (the module docstring derives each), or ``None`` where the literature gives none for
    torch's schedule or its conditions do not hold.

    GPipe and 1F1B: ``(p - 1) / (m + p - 1)``; Interleaved1F1B and LoopedBFS with ``m >= p``
    or ``v = 1``: ``(p - 1) / (v m + p - 1)``; any ratio of backward to forward time.

    Raises:
        ValueError, TypeError: a combination :func:`~.schedules.registry.build_plan` refuses.
    """
    name, p, v, m = _checked(schedule, ranks, microbatches, stages_per_rank)
    if name in ("GPipe", "1F1B"):
        return (p - 1) / (m + p - 1)
    if name in ("Interleaved1F1B", "LoopedBFS") and (m >= p or v == 1):
        return (p - 1) / (v * m + p - 1)
    return None


def closed_form_step_s(schedule: str, ranks: int, microbatches: int,
                       stages_per_rank: int | None = None, *, forward_s: float = 1.0,
                       backward_s: float = 2.0) -> float | None:
    """Seconds of one step where :func:`bubble_fraction` has a closed form:
    ``(v m + p - 1)(forward_s + backward_s)``, with ``forward_s`` and ``backward_s`` one
    *stage's* times (equal stages, free transfers); ``None`` elsewhere."""
    from distlab._checks import check_float

    f = check_float("forward_s (seconds)", forward_s, minimum=0)
    b = check_float("backward_s (seconds)", backward_s, minimum=0)
    if bubble_fraction(schedule, ranks, microbatches, stages_per_rank) is None:
        return None
    _, p, v, m = _checked(schedule, ranks, microbatches, stages_per_rank)
    return (v * m + p - 1) * (f + b)


def grid_bubble_fraction(plan: PipelinePlan) -> float:
    """The idle share of the plan's unit grid: idle ``(rank, step)`` cells over ``ranks x
    steps`` (every action one step, an overlapped step one busy cell; rows shorter than the
    longest idle to its end). Equals the simulated bubble only where every action takes the
    same time."""
    steps = max((len(row) for row in plan.grid), default=0)
    if steps == 0:
        return 0.0
    busy = sum(1 for row in plan.grid for step in row if step)
    return 1.0 - busy / (plan.ranks * steps)


def _release_key(plan: PipelinePlan, released_by: str) -> dict[tuple[int, int], Action]:
    """``(stage, microbatch) -> the action that releases its activations``."""
    out: dict[tuple[int, int], Action] = {}
    for _, a in plan.all_compute():
        key = (a.stage, a.microbatch)
        if a.kind is Kind.FULL_BACKWARD:
            out[key] = a
        elif a.kind is Kind.BACKWARD_INPUT and (released_by == "I" or key not in out):
            out[key] = a
        elif a.kind is Kind.BACKWARD_WEIGHT and released_by == "W":
            out[key] = a
    return out


def in_flight(plan: PipelinePlan, *, released_by: Released = "W"
              ) -> tuple[tuple[dict[int, int], ...], ...]:
    """Microbatches in flight on each rank after each grid step, per stage.

    ``in_flight(plan)[rank][t]`` maps each stage of ``rank`` to the microbatches whose forward
    has run there by step ``t`` and whose activations have not yet been released (see the
    module docstring for ``released_by``). Counted from the plan's order alone.
    """
    released_by = check_choice("released_by", released_by, ["W", "I"])
    release = _release_key(plan, released_by)
    releasing = set(release.values())
    out = []
    for rank in range(plan.ranks):
        held = dict.fromkeys(plan.stages_of(rank), 0)
        row = []
        for step in plan.grid[rank]:
            for a in step:
                if a.kind is Kind.FORWARD:
                    held[a.stage] = held.get(a.stage, 0) + 1
            for a in step:
                if a in releasing:
                    held[a.stage] = held.get(a.stage, 0) - 1
            row.append(dict(held))
        out.append(tuple(row))
    return tuple(out)


def _peak_during(plan: PipelinePlan, released_by: str,
                 weight: Sequence[int]) -> tuple[int, ...]:
    """Per rank: the largest ``sum_s weight[s] * held[s]``, held counted with the forwards of a
    step before its releases."""
    release = _release_key(plan, released_by)
    releasing = set(release.values())
    peaks = []
    for rank in range(plan.ranks):
        held, peak = 0, 0
        for step in plan.grid[rank]:
            held += sum(weight[a.stage] for a in step if a.kind is Kind.FORWARD)
            peak = max(peak, held)
            held -= sum(weight[a.stage] for a in step if a in releasing)
        peaks.append(peak)
    return tuple(peaks)


def peak_in_flight(plan: PipelinePlan, *, released_by: Released = "W") -> tuple[int, ...]:
    """The most microbatch-stages each rank holds activations for at once (a rank with ``v``
    stages counts each of its stages' microbatches): 1F1B's rank ``r`` holds ``p - r``,
    GPipe's every rank ``m``."""
    released_by = check_choice("released_by", released_by, ["W", "I"])
    return _peak_during(plan, released_by, [1] * plan.num_stages)


def _stage_bytes(stage_nbytes: int | Sequence[int], num_stages: int) -> tuple[int, ...]:
    if isinstance(stage_nbytes, Sequence) and not isinstance(stage_nbytes, (str, bytes)):
        out = tuple(check_int(f"stage_nbytes[{i}] (bytes)", b, minimum=0)
                    for i, b in enumerate(stage_nbytes))
        if len(out) != num_stages:
            raise ValueError(f"stage_nbytes must hold one byte count per stage ({num_stages}), "
                             f"got {len(out)}")
        return out
    return (check_int("stage_nbytes (bytes)", stage_nbytes, minimum=0),) * num_stages


def activation_bytes(plan: PipelinePlan, stage_nbytes: int | Sequence[int], *,
                     released_by: Released = "W") -> tuple[int, ...]:
    """Peak activation bytes each rank holds: the largest sum over its stages of microbatches
    in flight x ``stage_nbytes`` (bytes one microbatch's activations take on a stage: one int
    for every stage, or one per stage). With equal stages, ``peak_in_flight x stage_nbytes``."""
    released_by = check_choice("released_by", released_by, ["W", "I"])
    return _peak_during(plan, released_by, _stage_bytes(stage_nbytes, plan.num_stages))


@dataclass(frozen=True)
class RankTraffic:
    """Bytes one rank moves over point-to-point links in one step.

    Attributes:
        rank: the rank.
        sent_activation_nbytes: activations it sends forward (``SEND_F``).
        sent_gradient_nbytes: input gradients it sends back (``SEND_B``).
        received_activation_nbytes: activations it receives (``RECV_F``).
        received_gradient_nbytes: gradients it receives (``RECV_B``).
        messages_sent: how many sends.
    """

    rank: int
    sent_activation_nbytes: int
    sent_gradient_nbytes: int
    received_activation_nbytes: int
    received_gradient_nbytes: int
    messages_sent: int

    @property
    def sent_nbytes(self) -> int:
        """Activations forward plus gradients back."""
        return self.sent_activation_nbytes + self.sent_gradient_nbytes

    @property
    def received_nbytes(self) -> int:
        """Activations and gradients received."""
        return self.received_activation_nbytes + self.received_gradient_nbytes


def traffic(plan: PipelinePlan, boundary_nbytes: int | Sequence[int]) -> tuple[RankTraffic, ...]:
    """Bytes each rank sends and receives in one step, from the sends and receives the plan
    implies (:meth:`PipelinePlan.rank_actions`): ``boundary_nbytes`` are the bytes of one
    microbatch's activation from stage ``s`` to ``s + 1`` (one int, or one per boundary); the
    gradient sent back across that boundary is as large. Stages on one rank send nothing."""
    nbytes = boundary_bytes(boundary_nbytes, plan.num_stages)
    out = []
    for rank in range(plan.ranks):
        tally = {k: 0 for k in (Kind.SEND_F, Kind.SEND_B, Kind.RECV_F, Kind.RECV_B)}
        sends = 0
        for a in plan.rank_actions(rank):
            if a.kind is Kind.SEND_F:      # stage s -> s + 1
                tally[a.kind] += nbytes[a.stage]
            elif a.kind is Kind.RECV_F:    # stage s - 1 -> s
                tally[a.kind] += nbytes[a.stage - 1]
            elif a.kind is Kind.SEND_B:    # stage s -> s - 1
                tally[a.kind] += nbytes[a.stage - 1]
            elif a.kind is Kind.RECV_B:    # stage s + 1 -> s
                tally[a.kind] += nbytes[a.stage]
            sends += a.kind in (Kind.SEND_F, Kind.SEND_B)
        out.append(RankTraffic(rank, tally[Kind.SEND_F], tally[Kind.SEND_B], tally[Kind.RECV_F],
                               tally[Kind.RECV_B], sends))
    return tuple(out)
