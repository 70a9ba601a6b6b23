"""A :class:`~distlab.pipeline_parallel.plan.PipelinePlan` run on a clock: every action's start
and end in seconds, the step time, each rank's busy and idle time and the bubble.

The model, in full:

- **Compute.** Each rank runs its compute actions in plan order (:meth:`PipelinePlan.compute`),
  one at a time, each for its stage's time (:class:`StageTimes`: forward, backward-input and
  backward-weight seconds per stage; a full backward ``B`` takes ``I + W``). The grid's idle
  steps are not waits: a rank starts its next action as soon as it can.
- **Dependencies.** An action starts when its rank is free and every action it depends on
  (:meth:`PipelinePlan.dependencies`) has finished; a dependency that ran on another rank also
  waits for its tensor to arrive, :class:`P2PCost` seconds for the bytes crossing that stage
  boundary (:func:`simulate`'s ``boundary_nbytes``; the input gradient sent back is as large as
  the activation sent forward). Stages on one rank hand tensors over in memory, at no cost.
- **Transfers** take no compute time on either rank (they run on the link, as NCCL's
  send/receive kernels mostly do beside compute) and never queue: every transfer starts when
  its producer ends, whatever else the link carries, and a send never blocks its sender.
- **Overlapped steps** (two actions in one grid step, DualPipe-V's forward beside a backward):
  with ``overlap="serial"`` (the default) they run back to back in their order, because a
  forward and a backward share the same SMs; what the overlap buys on real hardware is hiding
  the transfers, which this model never charges to the rank anyway. With ``overlap="max"``
  both start together, once both are ready, and the rank is busy for the longer of the two
  (compute overlapped perfectly: a lower bound).

The step time is the last action's end (the step starts at 0 on every rank); a rank's idle time
is the step time less its busy time, and the bubble fraction is the idle share of all ranks'
time, ``sum(idle) / (ranks * step time)``.

A plan whose ranks wait on each other in a circle (or on an action no rank runs) cannot finish:
:func:`simulate` raises a ``ValueError`` naming every stuck rank, the action it is stuck at and
the dependency it waits on, never loops.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from distlab._checks import check_choice, check_float, check_int, check_str
from distlab.pipeline_parallel.actions import Action, Kind
from distlab.pipeline_parallel.plan import PipelinePlan
from distlab.timeline import Timeline

__all__ = ["DEFAULT_P2P_PRESET", "KIND_CATEGORY", "ActionTiming", "Overlap", "P2PCost",
           "Simulation", "StageTimes", "boundary_bytes", "simulate"]

Overlap = Literal["serial", "max"]

#: The timeline category (and palette name) of each compute kind.
KIND_CATEGORY: dict[Kind, str] = {
    Kind.FORWARD: "forward", Kind.FULL_BACKWARD: "backward",
    Kind.BACKWARD_INPUT: "backward_input", Kind.BACKWARD_WEIGHT: "backward_weight",
}

#: The link :func:`simulate` prices transfers on when given none: a preset of
#: :mod:`distlab.collectives.model.presets` (NVLink 4 between two H100 SXM GPUs of one box).
DEFAULT_P2P_PRESET = "nvlink4_h100"


def _per_stage(name: str, values: Any) -> tuple[float, ...]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise TypeError(f"{name} must be a sequence of seconds, one per stage, got "
                        f"{type(values).__name__} {values!r:.80}")
    out = tuple(check_float(f"{name}[{i}] (seconds)", v, minimum=0)
                for i, v in enumerate(values))
    if not out:
        raise ValueError(f"{name} must hold one time per stage (at least one), got ()")
    return out


@dataclass(frozen=True)
class StageTimes:
    """Compute seconds of one microbatch on each stage: forward, backward-input, backward-weight.

    A full backward ``B`` takes ``backward_input_s + backward_weight_s`` (the two halves a
    zero-bubble schedule runs apart).

    Attributes:
        forward_s: seconds of ``F`` per stage.
        backward_input_s: seconds of ``I`` per stage (the input gradient).
        backward_weight_s: seconds of ``W`` per stage (the weight gradient).
    """

    forward_s: tuple[float, ...]
    backward_input_s: tuple[float, ...]
    backward_weight_s: tuple[float, ...]

    def __post_init__(self) -> None:
        f = _per_stage("forward_s", self.forward_s)
        i = _per_stage("backward_input_s", self.backward_input_s)
        w = _per_stage("backward_weight_s", self.backward_weight_s)
        if not len(f) == len(i) == len(w):
            raise ValueError(f"forward_s, backward_input_s and backward_weight_s must have one "
                             f"time per stage each, got {len(f)}, {len(i)} and {len(w)}")
        object.__setattr__(self, "forward_s", f)
        object.__setattr__(self, "backward_input_s", i)
        object.__setattr__(self, "backward_weight_s", w)

    @classmethod
    def equal(cls, stages: int, forward_s: float = 1.0, backward_input_s: float = 1.0,
              backward_weight_s: float = 1.0) -> StageTimes:
        """Every one of ``stages`` stages alike. The defaults (1 s each) make ``B = 2 F``, the
        usual rule of thumb, with ``I = W`` (the zero-bubble paper's assumption)."""
        n = check_int("stages", stages, minimum=1)
        return cls((forward_s,) * n, (backward_input_s,) * n, (backward_weight_s,) * n)

    @property
    def num_stages(self) -> int:
        """Stages these times cover."""
        return len(self.forward_s)

    @property
    def backward_s(self) -> tuple[float, ...]:
        """Seconds of a full backward ``B`` per stage: ``I + W``."""
        return tuple(i + w for i, w in zip(self.backward_input_s, self.backward_weight_s,
                                           strict=True))

    def with_imbalance(self, stage: int, factor: float) -> StageTimes:
        """These times with every time of ``stage`` multiplied by ``factor`` (> 0): one stage
        slower (``factor > 1``) or faster than the rest."""
        stage = check_int("stage", stage, minimum=0, maximum=self.num_stages - 1)
        factor = check_float("factor", factor, minimum=0, exclusive_minimum=True)

        def scaled(values: tuple[float, ...]) -> tuple[float, ...]:
            return tuple(v * factor if s == stage else v for s, v in enumerate(values))

        return StageTimes(scaled(self.forward_s), scaled(self.backward_input_s),
                          scaled(self.backward_weight_s))

    def seconds(self, action: Action) -> float:
        """Compute seconds of ``action`` (``F``, ``B``, ``I`` or ``W``)."""
        s = action.stage
        if not 0 <= s < self.num_stages:
            raise ValueError(f"action {action}: stage {s} is outside 0..{self.num_stages - 1}")
        if action.kind is Kind.FORWARD:
            return self.forward_s[s]
        if action.kind is Kind.FULL_BACKWARD:
            return self.backward_input_s[s] + self.backward_weight_s[s]
        if action.kind is Kind.BACKWARD_INPUT:
            return self.backward_input_s[s]
        if action.kind is Kind.BACKWARD_WEIGHT:
            return self.backward_weight_s[s]
        raise ValueError(f"action {action} is not a compute action (F, B, I or W)")


@dataclass(frozen=True)
class P2PCost:
    """Seconds to move ``n`` bytes between two ranks: ``alpha_s + n * seconds_per_byte``.

    Attributes:
        name: the link, in words.
        alpha_s: fixed seconds per transfer (latency).
        seconds_per_byte: 1 / bandwidth (bytes per second).
        source: where the two figures come from.
    """

    name: str
    alpha_s: float
    seconds_per_byte: float
    source: str = ""

    def __post_init__(self) -> None:
        check_str("name", self.name)
        check_float("alpha_s (seconds)", self.alpha_s, minimum=0)
        check_float("seconds_per_byte", self.seconds_per_byte, minimum=0)

    def seconds(self, nbytes: int) -> float:
        """Seconds to move ``nbytes`` (>= 0) from one rank to another."""
        nbytes = check_int("nbytes", nbytes, minimum=0)
        return self.alpha_s + nbytes * self.seconds_per_byte

    @property
    def bandwidth_gbps(self) -> float:
        """1 / seconds_per_byte in GB/s (inf for a free link)."""
        return float("inf") if self.seconds_per_byte == 0 else 1e-9 / self.seconds_per_byte

    @classmethod
    def free(cls) -> P2PCost:
        """Transfers that take no time: the compute-only model of the closed forms."""
        return cls("free (no transfer cost)", 0.0, 0.0, "transfers cost nothing")

    @classmethod
    def from_preset(cls, name: str = DEFAULT_P2P_PRESET) -> P2PCost:
        """The alpha and beta of a link preset of :mod:`distlab.collectives.model.presets`
        (``"nvlink4_h100"``, ``"pcie4_x16"``, ``"ethernet_100g"``, ``"loopback"``), with its
        source."""
        from distlab.collectives.model.presets import get_preset

        preset = get_preset(name)
        return cls(preset.name, preset.alpha, preset.beta, preset.source)

    @classmethod
    def from_fit(cls, name: str, fit: Any) -> P2PCost:
        """From a latency + bandwidth line fitted to measured transfers
        (:func:`distlab.fit.fit_line` of seconds against bytes: a
        :class:`~distlab.fit.LineFit`)."""
        return cls(name, fit.intercept_s, fit.slope_s_per_unit,
                   f"fitted: R^2 {fit.r2:.3f}, worst relative residual "
                   f"{fit.max_rel_residual:.1%}")


def boundary_bytes(nbytes: int | Sequence[int], num_stages: int) -> tuple[int, ...]:
    """Bytes of one microbatch's activation crossing each stage boundary ``s -> s + 1``
    (``num_stages - 1`` of them): one int for every boundary, or one per boundary."""
    num_stages = check_int("num_stages", num_stages, minimum=1)
    if isinstance(nbytes, Sequence) and not isinstance(nbytes, (str, bytes)):
        out = tuple(check_int(f"boundary_nbytes[{i}] (bytes)", b, minimum=0)
                    for i, b in enumerate(nbytes))
        if len(out) != num_stages - 1:
            raise ValueError(f"boundary_nbytes must hold one byte count per stage boundary "
                             f"({num_stages - 1} for {num_stages} stages), got {len(out)}")
        return out
    return (check_int("boundary_nbytes (bytes)", nbytes, minimum=0),) * (num_stages - 1)


@dataclass(frozen=True)
class ActionTiming:
    """When one compute action ran: on ``rank``, from ``start_s`` to ``end_s`` (seconds from
    the start of the step)."""

    rank: int
    action: Action
    start_s: float
    end_s: float

    @property
    def seconds(self) -> float:
        """``end_s - start_s``."""
        return self.end_s - self.start_s


@dataclass(frozen=True)
class Simulation:
    """A simulated pipeline step (see the module docstring for the model).

    Attributes:
        plan: the plan simulated.
        times: the stage times it ran with.
        p2p: the link transfers were priced on.
        overlap: how overlapped steps ran, ``"serial"`` or ``"max"``.
        timings: every compute action's :class:`ActionTiming`, rank by rank in plan order.
        step_time_s: seconds from the start to the last action's end.
        busy_s: seconds each rank computes.
        transfers: ``(dependency, action, seconds)`` for every tensor that crossed ranks.
    """

    plan: PipelinePlan
    times: StageTimes
    p2p: P2PCost
    overlap: str
    timings: tuple[ActionTiming, ...]
    step_time_s: float
    busy_s: tuple[float, ...]
    transfers: tuple[tuple[Action, Action, float], ...] = ()
    _by_action: dict[Action, ActionTiming] = field(default_factory=dict, init=False,
                                                   repr=False, compare=False)

    def __post_init__(self) -> None:
        self._by_action.update({t.action: t for t in self.timings})

    @property
    def idle_s(self) -> tuple[float, ...]:
        """Seconds each rank waits within the step: ``step_time_s - busy_s``."""
        return tuple(max(0.0, self.step_time_s - b) for b in self.busy_s)

    @property
    def bubble_fraction(self) -> float:
        """Idle share of all ranks' time: ``sum(idle_s) / (ranks * step_time_s)`` (0 for a
        step of no time)."""
        total = self.plan.ranks * self.step_time_s
        return sum(self.idle_s) / total if total > 0 else 0.0

    @property
    def busiest_s(self) -> float:
        """The largest rank's busy seconds: no step can be shorter."""
        return max(self.busy_s, default=0.0)

    def timing(self, action: Action) -> ActionTiming:
        """The :class:`ActionTiming` of ``action``; ``KeyError`` naming it if the plan has
        none."""
        try:
            return self._by_action[action]
        except KeyError:
            raise KeyError(f"action {action} is not in the plan") from None

    def rank_timings(self, rank: int) -> tuple[ActionTiming, ...]:
        """``rank``'s timings in the order it ran them."""
        rank = check_int("rank", rank, minimum=0, maximum=self.plan.ranks - 1)
        return tuple(t for t in self.timings if t.rank == rank)

    def to_timeline(self, *, origin_us: float = 0.0) -> Timeline:
        """The step as a :class:`~distlab.timeline.Timeline`: one span per compute action on
        lane ``"rank{r}/compute"``, named as torch names the action (``"2F0"``), of category
        ``"forward"``, ``"backward"``, ``"backward_input"`` or ``"backward_weight"``, with args
        ``stage``, ``microbatch`` and ``kind`` (``"F"``...); microseconds from ``origin_us``.
        A measured run recorded the same way draws the same way."""
        origin_us = check_float("origin_us (microseconds)", origin_us)
        tl = Timeline(notes=[f"simulated {self.plan.schedule}: {self.plan.ranks} ranks, "
                             f"{self.plan.microbatches} microbatches, p2p {self.p2p.name}"])
        for t in sorted(self.timings, key=lambda t: (t.rank, t.start_s, t.end_s)):
            a = t.action
            tl.record(str(a), KIND_CATEGORY[a.kind], f"rank{t.rank}/compute",
                      origin_us + t.start_s * 1e6, max(0.0, t.end_s - t.start_s) * 1e6,
                      {"stage": a.stage, "microbatch": a.microbatch, "kind": a.kind.value})
        return tl


def _check_plan(plan: PipelinePlan) -> None:
    """Every compute action once, on the rank that holds its stage, within the plan's sizes."""
    if not isinstance(plan, PipelinePlan):
        raise TypeError(f"plan must be a PipelinePlan, got {type(plan).__name__}")
    if len(plan.grid) != plan.ranks:
        raise ValueError(f"plan.grid has {len(plan.grid)} rows for ranks={plan.ranks}")
    seen: dict[Action, int] = {}
    for rank, a in plan.all_compute():
        if not a.kind.is_compute:
            raise ValueError(f"plan: rank {rank} holds {a}, not a compute action (F, B, I, W)")
        if not 0 <= a.stage < plan.num_stages:
            raise ValueError(f"plan: rank {rank} runs {a}, whose stage is outside "
                             f"0..{plan.num_stages - 1}")
        if not 0 <= a.microbatch < plan.microbatches:
            raise ValueError(f"plan: rank {rank} runs {a}, whose microbatch is outside "
                             f"0..{plan.microbatches - 1}")
        if plan.rank_of(a.stage) != rank:
            raise ValueError(f"plan: rank {rank} runs {a}, but stage {a.stage} sits on rank "
                             f"{plan.rank_of(a.stage)}")
        if a in seen:
            raise ValueError(f"plan: {a} runs twice (rank {seen[a]} and rank {rank})")
        seen[a] = rank


def _units(plan: PipelinePlan, rank: int, overlap: str) -> list[tuple[Action, ...]]:
    """What ``rank`` runs as one unit: each action alone, or an overlapped step together."""
    if overlap == "serial":
        return [(a,) for a in plan.compute(rank)]
    return [step for step in plan.grid[rank] if step]


def _deadlock(plan: PipelinePlan, units: list[list[tuple[Action, ...]]], pos: list[int],
              end: dict[Action, float], owner: dict[Action, int]) -> ValueError:
    """The error naming every stuck rank, where it is stuck and what it waits on."""
    lines = []
    for rank, (row, p) in enumerate(zip(units, pos, strict=True)):
        if p >= len(row):
            continue
        unit = row[p]
        for a in unit:
            missing = [d for d in plan.dependencies(a) if d not in end]
            if not missing:
                continue
            d = missing[0]
            if d not in owner:
                why = "which no rank runs"
            elif d in unit:
                why = "which runs beside it in the same overlapped step"
            elif owner[d] == rank:
                why = f"which rank {rank} runs later itself"
            else:
                stuck_at = units[owner[d]][pos[owner[d]]] if pos[owner[d]] < len(
                    units[owner[d]]) else ()
                at = "+".join(map(str, stuck_at)) or "?"
                why = f"of rank {owner[d]}, itself stuck at {at}"
            lines.append(f"rank {rank} is stuck at {a}, waiting on {d} ({why})")
            break
    return ValueError(f"plan {plan.schedule!r} deadlocks: " + "; ".join(lines))


def simulate(plan: PipelinePlan, times: StageTimes | None = None, *,
             boundary_nbytes: int | Sequence[int] = 0, p2p: P2PCost | None = None,
             overlap: Overlap = "serial") -> Simulation:
    """Run ``plan`` on a clock (the model is in the module docstring).

    Args:
        plan: the plan.
        times: compute seconds per stage; default :meth:`StageTimes.equal` (1 s forward,
            1 s input gradient, 1 s weight gradient on every stage).
        boundary_nbytes: bytes of one microbatch's activation from stage ``s`` to ``s + 1``
            (the gradient sent back is as large): one int for every boundary or one per
            boundary; default 0 (transfers pay only ``p2p.alpha_s``).
        p2p: the link between ranks; default :meth:`P2PCost.free` (transfers cost nothing:
            the model of the closed forms); a link of the collectives' models with
            :meth:`P2PCost.from_preset` (``"nvlink4_h100"``, ``"loopback"``, ...).
        overlap: ``"serial"`` (an overlapped step's two actions back to back) or ``"max"``
            (together, for the longer of the two).

    Raises:
        ValueError: a plan that deadlocks (naming each stuck rank, the action it is stuck at
            and the one it waits on), an action on a rank that does not hold its stage or run
            twice, times for another number of stages, a bad ``overlap``.
    """
    _check_plan(plan)
    times = StageTimes.equal(plan.num_stages) if times is None else times
    if not isinstance(times, StageTimes):
        raise TypeError(f"times must be a StageTimes, got {type(times).__name__}")
    if times.num_stages != plan.num_stages:
        raise ValueError(f"times cover {times.num_stages} stages, the plan has "
                         f"{plan.num_stages} ({plan.ranks} ranks x {plan.stages_per_rank})")
    nbytes = boundary_bytes(boundary_nbytes, plan.num_stages)
    p2p = P2PCost.free() if p2p is None else p2p
    if not isinstance(p2p, P2PCost):
        raise TypeError(f"p2p must be a P2PCost, got {type(p2p).__name__}")
    overlap = check_choice("overlap", overlap, ["serial", "max"])

    owner = {a: r for r, a in plan.all_compute()}
    units = [_units(plan, r, overlap) for r in range(plan.ranks)]
    pos = [0] * plan.ranks
    free = [0.0] * plan.ranks
    busy = [0.0] * plan.ranks
    end: dict[Action, float] = {}
    timings: list[ActionTiming] = []
    transfers: list[tuple[Action, Action, float]] = []

    def arrival(dep: Action, action: Action, rank: int) -> float | None:
        if dep not in end:
            return None
        if owner[dep] == rank:
            return end[dep]
        # forward: the activation of boundary dep.stage; backward: the gradient of action.stage
        boundary = min(dep.stage, action.stage)
        seconds = p2p.seconds(nbytes[boundary])
        transfers.append((dep, action, seconds))
        return end[dep] + seconds

    progressed = True
    while progressed:
        progressed = False
        for rank in range(plan.ranks):
            while pos[rank] < len(units[rank]):
                unit = units[rank][pos[rank]]
                if any(d not in end for a in unit for d in plan.dependencies(a)):
                    break
                ready = free[rank]
                for a in unit:
                    for d in plan.dependencies(a):
                        ready = max(ready, arrival(d, a, rank))  # type: ignore[type-var]
                span = [times.seconds(a) for a in unit]
                for a, s in zip(unit, span, strict=True):
                    end[a] = ready + s
                    timings.append(ActionTiming(rank, a, ready, ready + s))
                free[rank] = ready + max(span)
                busy[rank] += max(span)
                pos[rank] += 1
                progressed = True
    if any(p < len(row) for p, row in zip(pos, units, strict=True)):
        raise _deadlock(plan, units, pos, end, owner)
    order = {a: i for r in range(plan.ranks) for i, a in enumerate(plan.compute(r))}
    timings.sort(key=lambda t: (t.rank, order[t.action]))
    return Simulation(plan=plan, times=times, p2p=p2p, overlap=overlap, timings=tuple(timings),
                      step_time_s=max(free, default=0.0), busy_s=tuple(busy),
                      transfers=tuple(transfers))
