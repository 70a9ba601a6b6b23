"""The parts registry: what a part is, the context it runs in and what it returns.

A part is a function ``run(ctx) -> PartResult``. It measures, records each timed call as a span on
``ctx.timeline`` (lane ``"<part>/<step>"``; steps of one part run one after another, so slices of
a lane never overlap) and says what it skipped and why in ``PartResult.skipped``. Parts never
write files: :mod:`distlab.profile.writer` does, on rank 0 only.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from distlab._checks import check_choice
from distlab.timeline import Timeline, now_us

__all__ = ["PART_NAMES", "PartContext", "PartResult", "get_part"]

#: Part name -> module under distlab.profile that defines ``run(ctx)``; in run order.
_MODULES = {"env": "env_part", "transfers": "transfers_part", "gpus": "gpus_part",
            "collectives": "collectives_part", "ddp": "ddp_part"}
PART_NAMES: tuple[str, ...] = tuple(_MODULES)


@dataclass
class PartContext:
    """What every part gets.

    Attributes:
        quick: small sizes and few repeats (the ``--quick`` profile, minutes on 2 CPU cores).
        timeline: where parts record their timed calls (microseconds, host monotonic clock).
        world_size: ranks under torchrun (WORLD_SIZE), else 1 (parts spawn their own ranks).
        rank: this process's rank under torchrun, else 0.
        progress: show tqdm bars on stderr.
        timeout: seconds allowed for each multi-process call.
        rounds: timed rounds per allreduce sweep (None: the part's default, 20 in the full
            profile and 5 in the quick one). A row's mean is known to about 1/sqrt(rounds) of
            its rounds' spread.
        rehearse: a fake box (a key of :data:`distlab.transfers.gpu_box.REHEARSAL_BOXES`) whose
            GPUs every multi-GPU decision takes as this host's: host memory stands in for each
            GPU and gloo for NCCL, and every row so made is labelled rehearsal; None: the real
            host.
    """

    quick: bool = False
    timeline: Timeline = field(default_factory=Timeline)
    world_size: int = 1
    rank: int = 0
    progress: bool = True
    timeout: float = 900.0
    torchrun: bool = False
    rounds: int | None = None
    rehearse: str | None = None

    @contextmanager
    def timed(self, lane: str, name: str, **args: Any) -> Iterator[dict[str, Any]]:
        """Record the enclosed call as one span ``name`` on ``lane`` (even if it raises)."""
        start = now_us()
        extra: dict[str, Any] = dict(args)
        try:
            yield extra
        finally:
            self.timeline.record(name, lane.split("/", 1)[0], lane, start,
                                 max(now_us() - start, 0.0), args=extra)


@dataclass
class PartResult:
    """One part's outcome.

    Attributes:
        name: the part (``env``, ``transfers``, ``gpus``, ``collectives``, ``ddp``).
        status: ``ok``, ``skipped`` (nothing could run here), ``failed`` or ``interrupted``.
        payload: JSON-ready measurements (the part's own keys).
        skipped: ``[{"what", "why"}]`` for every step not run here (e.g. NCCL without CUDA).
        reason: why the part as a whole was skipped/failed/interrupted ("" when ok).
        seconds: wall time of the part.
    """

    name: str
    status: str = "ok"
    payload: dict[str, Any] = field(default_factory=dict)
    skipped: list[dict[str, str]] = field(default_factory=list)
    reason: str = ""
    seconds: float = 0.0


def get_part(name: str) -> Callable[[PartContext], PartResult]:
    """The ``run`` function of part ``name`` (one of :data:`PART_NAMES`)."""

    check_choice("name", name, PART_NAMES)
    return importlib.import_module(f"distlab.profile.{_MODULES[name]}").run
