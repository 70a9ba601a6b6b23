"""The plan of a collective as data: :class:`Schedule` -> :class:`Step` -> :class:`Transfer`.

A schedule is what every other part of :mod:`distlab.collectives` reads: it is drawn
(:mod:`distlab.viz.allreduce`), costed (:mod:`distlab.collectives.model.cost`), simulated on NumPy
buffers (:mod:`distlab.collectives.check.simulate`) and executed over ``torch.distributed``
point-to-point (:mod:`distlab.collectives.runtime.execute`).

Semantics of one step (synchronous, like a round of exchanges in MPI):

1. every transfer reads the *sender's* elements ``[start, stop)`` as they were when the step began;
2. then every receiver applies its incoming transfers in list order: ``"reduce"`` combines them
   into its own elements (``dst = op(dst, incoming)``), ``"copy"`` overwrites them.

Ranges are element indices (not bytes) into the flat buffer of ``count`` elements that every rank
holds. Empty ranges never appear: builders drop them, so ``count=0`` gives zero steps.

A message is one transfer, except in a *packed* step (``Step(..., packed=True)``), where all the
transfers from one rank to another travel as one message, in list order: what MPICH does when it
copies scattered blocks into a contiguous temporary buffer before sending (Bruck's algorithms,
binomial trees whose subtrees wrap around the root). The executor packs and unpacks; the cost
model counts one message (:meth:`Step.messages`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from distlab._checks import check_instance, check_int

__all__ = ["KINDS", "Schedule", "Step", "Transfer", "check_count", "format_schedule",
           "check_world_size"]

Kind = Literal["reduce", "copy"]
KINDS: tuple[str, ...] = ("reduce", "copy")


@dataclass(frozen=True)
class Transfer:
    """Rank ``src`` sends its elements ``[start, stop)`` to rank ``dst``, which reduces or copies.

    Attributes:
        src: sending rank.
        dst: receiving rank (``!= src``).
        start: first element index (inclusive).
        stop: last element index (exclusive), ``> start``.
        kind: ``"reduce"`` (combine with the receiver's elements) or ``"copy"`` (overwrite).
    """

    src: int
    dst: int
    start: int
    stop: int
    kind: Kind

    @property
    def count(self) -> int:
        """Number of elements moved."""
        return self.stop - self.start


@dataclass(frozen=True)
class Step:
    """A set of transfers that run concurrently. ``label`` names the phase (for pictures);
    ``packed``: the transfers from one rank to another travel as one message."""

    transfers: tuple[Transfer, ...]
    label: str = ""
    packed: bool = False

    def messages(self) -> list[tuple[int, int, tuple[Transfer, ...]]]:
        """``(src, dst, transfers)`` of every message, in order of first appearance: one per
        transfer, or in a packed step one per ``(src, dst)`` pair."""
        if not self.packed:
            return [(t.src, t.dst, (t,)) for t in self.transfers]
        groups: dict[tuple[int, int], list[Transfer]] = {}
        for t in self.transfers:
            groups.setdefault((t.src, t.dst), []).append(t)
        return [(src, dst, tuple(ts)) for (src, dst), ts in groups.items()]

    def sends(self, rank: int) -> list[Transfer]:
        """Transfers this rank sends in this step, in schedule order."""
        return [t for t in self.transfers if t.src == rank]

    def recvs(self, rank: int) -> list[Transfer]:
        """Transfers this rank receives in this step, in schedule order."""
        return [t for t in self.transfers if t.dst == rank]


@dataclass(frozen=True)
class Schedule:
    """The plan of one collective for ``world_size`` ranks over ``count`` elements.

    Attributes:
        algorithm: name of the builder that made it (a key of its collective's registry).
        world_size: number of ranks, >= 1.
        count: elements of the buffer every rank holds, >= 0 (for an allreduce the vector;
            for the other collectives see :mod:`distlab.collectives.plan.semantics`).
        steps: the steps, executed in order.
        options: the builder options that shaped it (e.g. ``{"segment_size": 1024}``).
        collective: which collective it computes (``"all_reduce"``, ``"broadcast"``, ...).
    """

    algorithm: str
    world_size: int
    count: int
    steps: tuple[Step, ...]
    options: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    collective: str = "all_reduce"

    def __post_init__(self) -> None:
        validate_steps(self.steps, self.world_size, self.count)

    @property
    def num_transfers(self) -> int:
        """Total transfers over all steps."""
        return sum(len(s.transfers) for s in self.steps)

    @property
    def num_messages(self) -> int:
        """Total messages over all steps (fewer than transfers where steps are packed)."""
        return sum(len(s.messages()) for s in self.steps)

    def elements_moved(self) -> int:
        """Total elements sent over all steps and ranks."""
        return sum(t.count for s in self.steps for t in s.transfers)


def validate_steps(steps: Sequence[Step], world_size: int, count: int) -> None:
    """Raise ``ValueError`` if a step is malformed.

    Checks ranks in ``[0, world_size)``, ``src != dst``, ``0 <= start < stop <= count``, kinds,
    and that no rank receives two transfers into overlapping ranges in one step unless both
    reduce (a copy must have a single, unambiguous writer).
    """
    world_size = check_int("world_size", world_size, minimum=1)
    count = check_int("count (elements)", count, minimum=0)
    for i, step in enumerate(steps):
        check_instance(f"steps[{i}]", step, Step)
        by_dst: dict[int, list[Transfer]] = {}
        for t in step.transfers:
            if not (type(t.src) is type(t.dst) is type(t.start) is type(t.stop) is int):
                for field_name in ("src", "dst", "start", "stop"):
                    check_int(f"step {i}: transfer.{field_name}", getattr(t, field_name))
            if not (0 <= t.src < world_size and 0 <= t.dst < world_size):
                raise ValueError(f"step {i}: transfer {t} names a rank outside [0, {world_size})")
            if t.src == t.dst:
                raise ValueError(f"step {i}: transfer {t} sends to itself")
            if not (0 <= t.start < t.stop <= count):
                raise ValueError(f"step {i}: transfer {t} range outside [0, {count}) or empty")
            if t.kind not in KINDS:
                raise ValueError(f"step {i}: transfer kind {t.kind!r} not in {KINDS}")
            by_dst.setdefault(t.dst, []).append(t)
        for dst, ts in by_dst.items():
            ordered = sorted(ts, key=lambda t: t.start)
            for a, b in zip(ordered, ordered[1:], strict=False):
                if b.start < a.stop and "copy" in (a.kind, b.kind):
                    raise ValueError(f"step {i}: rank {dst} receives overlapping {a} and {b}; "
                                     "a copy must have a single writer")


def make_step(transfers: Iterable[Transfer], label: str = "", packed: bool = False) -> Step | None:
    """A step from the non-empty transfers, or ``None`` when none is left."""
    kept = tuple(t for t in transfers if t.stop > t.start)
    return Step(kept, label, packed) if kept else None


def collect(steps: Iterable[Step | None]) -> tuple[Step, ...]:
    """Drop the ``None`` (empty) steps."""
    return tuple(s for s in steps if s is not None)


def check_world_size(world_size: Any) -> int:
    """Validate ``world_size`` (an int >= 1) at a public boundary and return it."""
    return check_int("world_size", world_size, minimum=1)


def check_count(count: Any) -> int:
    """Validate ``count`` (elements, an int >= 0) at a public boundary and return it."""
    return check_int("count (elements)", count, minimum=0)


def format_schedule(schedule: Schedule, max_steps: int | None = None) -> str:
    """A plain-text listing: one line per step, ``src->dst [start:stop) kind`` per transfer."""
    if max_steps is not None:
        max_steps = check_int("max_steps", max_steps, minimum=0)
    lines = [f"{schedule.algorithm}: {schedule.world_size} ranks, {schedule.count} elements, "
             f"{len(schedule.steps)} steps, {schedule.num_messages} messages"]
    for i, step in enumerate(schedule.steps[:max_steps]):
        parts = [f"{t.src}->{t.dst} [{t.start}:{t.stop}) {t.kind}" for t in step.transfers]
        packed = ", packed" if step.packed else ""
        lines.append(f"  step {i + 1} ({step.label}{packed}): " + ", ".join(parts))
    if max_steps is not None and len(schedule.steps) > max_steps:
        lines.append(f"  ... {len(schedule.steps) - max_steps} more steps")
    return "\n".join(lines)
