"""Communication per training step of plain DDP and each ZeRO stage, read off the schedules.

Each stage runs these collectives per step on ``P`` parameters over ``N`` ranks (the ZeRO paper,
section 7): stage 0 (DDP) one all-reduce of the gradients; stages 1 and 2 a reduce-scatter of the
gradients (each rank receives the sum of its shard) and an all-gather of the updated parameters
(each rank sends its shard); stage 3 an all-gather of the parameters before forward, another
before backward (they were freed after forward) and a reduce-scatter of the gradients. A ring
all-reduce *is* a reduce-scatter followed by an all-gather, so stages 1 and 2 move what DDP moves,
and stage 3 half as much again.

Bytes are counted from the plans of :mod:`distlab.collectives.algorithms.registry` (default
algorithms, or the ones named), not from a closed form: the busiest rank's bytes sent in the whole
collective. Time is :func:`distlab.collectives.model.cost.cost` of the same plans with a link
preset's alpha, beta, gamma and duplex. Reduce-scatter and all-gather run on the flat buffer padded
to a multiple of ``N``, as the real implementation (:mod:`distlab.zero.optimizer`) does.
"""

from __future__ import annotations

from dataclasses import dataclass

from distlab._checks import check_int
from distlab.collectives.algorithms.registry import DEFAULT_ALGORITHM, build_plan
from distlab.collectives.model.cost import cost
from distlab.collectives.model.presets import LinkPreset
from distlab.collectives.plan.schedule import Schedule
from distlab.zero.memory_model import bytes_per_param, check_stage, shard_elements

__all__ = ["CommCall", "comm_seconds", "comm_volume", "sent_bytes", "unit_comm_calls",
           "zero_comm_calls"]

# (what, collective, whose bytes: "grad" or "param") per stage, in the order a step runs them
_CALLS = {
    0: (("all-reduce gradients", "all_reduce", "grad"),),
    1: (("reduce-scatter gradients", "reduce_scatter", "grad"),
        ("all-gather parameters", "all_gather", "param")),
    3: (("all-gather parameters (forward)", "all_gather", "param"),
        ("all-gather parameters (backward)", "all_gather", "param"),
        ("reduce-scatter gradients", "reduce_scatter", "grad")),
}
_CALLS[2] = _CALLS[1]


@dataclass(frozen=True)
class CommCall:
    """One collective of a step: ``count`` elements of ``itemsize`` bytes, planned by
    ``algorithm``; ``bytes_sent``: bytes the busiest rank sends in it."""

    what: str
    collective: str
    algorithm: str
    count: int
    itemsize: int
    bytes_sent: int
    schedule: Schedule


def sent_bytes(schedule: Schedule, itemsize: int) -> int:
    """Bytes sent by the rank that sends most over the whole ``schedule``."""
    per_rank = [0] * schedule.world_size
    for step in schedule.steps:
        for t in step.transfers:
            per_rank[t.src] += t.count * itemsize
    return max(per_rank, default=0)


def zero_comm_calls(params: int, world_size: int, stage: int, precision: str = "mixed", *,
                    algorithms: dict[str, str] | None = None) -> list[CommCall]:
    """The collectives of one step of ``stage`` (see the module docstring), in order.

    ``algorithms`` maps a collective name to an algorithm of
    :data:`distlab.collectives.algorithms.registry.PLANS` (default: :data:`DEFAULT_ALGORITHM`, ring
    for all three).
    """
    params = check_int("params", params, minimum=0)
    world_size = check_int("world_size", world_size, minimum=1)
    stage = check_stage(stage)
    p_bytes, g_bytes, _ = bytes_per_param(precision)
    chosen = {**DEFAULT_ALGORITHM, **(algorithms or {})}
    out = []
    for what, collective, whose in _CALLS[stage]:
        count = params if collective == "all_reduce" else (
            world_size * shard_elements(params, world_size))
        itemsize = g_bytes if whose == "grad" else p_bytes
        s = build_plan(collective, chosen[collective], world_size, count)
        out.append(CommCall(what, collective, chosen[collective], count, itemsize,
                            sent_bytes(s, itemsize), s))
    return out


def unit_comm_calls(unit_params: list[int] | tuple[int, ...], world_size: int,
                    precision: str = "mixed", *, algorithms: dict[str, str] | None = None
                    ) -> list[CommCall]:
    """Stage 3 as :mod:`distlab.zero.stage3` runs it: per unit (``unit_params`` elements each,
    padded to a multiple of ``N``) an all-gather before its forward, one before its backward
    and a reduce-scatter of its gradients; in the order a step issues them (every forward
    gather, then per unit in reverse: gather, reduce-scatter). ``what`` names the unit."""
    world_size = check_int("world_size", world_size, minimum=1)
    p_bytes, g_bytes, _ = bytes_per_param(precision)
    chosen = {**DEFAULT_ALGORITHM, **(algorithms or {})}

    def call(what: str, collective: str, n: int, itemsize: int) -> CommCall:
        count = world_size * shard_elements(n, world_size)
        s = build_plan(collective, chosen[collective], world_size, count)
        return CommCall(what, collective, chosen[collective], count, itemsize,
                        sent_bytes(s, itemsize), s)

    sizes = [check_int(f"unit_params[{i}]", n, minimum=0) for i, n in enumerate(unit_params)]
    out = [call(f"all-gather unit {k} (forward)", "all_gather", n, p_bytes)
           for k, n in enumerate(sizes)]
    for k in reversed(range(len(sizes))):
        out += [call(f"all-gather unit {k} (backward)", "all_gather", sizes[k], p_bytes),
                call(f"reduce-scatter unit {k}", "reduce_scatter", sizes[k], g_bytes)]
    return out


def comm_volume(params: int, world_size: int, stage: int, precision: str = "mixed") -> int:
    """Bytes the busiest rank sends per step (sum over the step's collectives)."""
    return sum(c.bytes_sent for c in zero_comm_calls(params, world_size, stage, precision))


def comm_seconds(params: int, world_size: int, stage: int, preset: LinkPreset,
                 precision: str = "mixed") -> float:
    """Predicted seconds of one step's collectives on ``preset`` (nothing overlapped)."""
    return sum(cost(c.schedule, preset.alpha, preset.beta, preset.gamma, c.itemsize,
                    duplex=preset.duplex)
               for c in zero_comm_calls(params, world_size, stage, precision))
