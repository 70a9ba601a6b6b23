"""The one timed loop of distlab's benchmarks: warm-up rounds, then timed rounds of every case.

    timings = timed_rounds(cases, lambda c, _: c.run(c.buf), warmup=2, rounds=9, rotate=True,
                           fences=rank_fences(device), prepare=lambda c: c.buf.copy_(c.pristine),
                           before_round=calibration_round(calibrator))
    for case, seconds in zip(cases, timings.seconds): ...

Rounds
    ``warmup + rounds`` rounds, indexed from 0 (:attr:`Round.index`). The first ``warmup`` are
    warm-ups: they run exactly like the others and record nothing (no seconds, CPU time, phases
    or spans). Timed round ``k`` (:attr:`Round.number`, ``0 .. rounds - 1``) is round
    ``warmup + k``.

A round
    ``progress(round)`` and ``before_round(round)`` (each if given: a progress line; the
    collective benchmarks' in-round calibration), then every case once. A case's turn:
    ``prepare(case)`` (untimed: refill its buffer), ``fences.sync()`` (the device's queued
    work), ``fences.barrier()`` (every rank), ``fences.thread_clock()`` (with ``cpu_time``),
    ``fences.clock()``, ``call(case, phases)``, ``fences.clock()``, ``fences.thread_clock()``
    (with ``cpu_time``); with ``process_cpu``, ``fences.process_clock()`` outermost on both
    sides. The call's seconds are the difference of its two clock readings; with
    :func:`rank_fences` the clock is :func:`distlab.clock.synced_seconds`, which waits for the
    device's queued work first, so a device call is timed to its end.

Case order: ``rotate``, a keyword without a default, so each benchmark states its choice
    ``rotate=False``: every round runs ``cases`` in the given order. ``rotate=True``: round ``i``
    (warm-ups counted, from 0) runs ``cases[i % n:] + cases[:i % n]`` (``n = len(cases)``), so
    each case goes first in turn and a burst of load from other work falls on every case alike
    over the rounds instead of on the same neighbours each time. ``group=k`` (with ``rotate``)
    keeps consecutive groups of ``k`` cases in their order and rotates within each group
    instead: round ``i`` runs each group from its member ``i mod (group length)`` on, so the cases
    of one group (the algorithms of one size) each come first in turn after the group before.

Results: a :class:`Timings`, always in the order of ``cases`` whatever the rotation
    ``seconds[c]``: case ``c``'s seconds per timed round. ``cpu_seconds[c]``: with ``cpu_time``,
    its thread CPU seconds per timed round (``time.thread_time``: the calling thread's own work,
    without waiting; other threads' work, e.g. gloo's, is not in it), else empty.
    ``process_cpu_seconds[c]``: with ``process_cpu``, the whole process's CPU seconds (user +
    system, every thread: gloo's too) per timed round, from ``getrusage``
    (:func:`process_cpu_seconds`), else empty.
    ``phases[c]``: what the case's call recorded with :meth:`Phases.record` in timed rounds, by
    name. ``spans``: with ``spans=`` a :class:`SpanLabels`, one span dict (the
    :class:`~distlab.timeline.Span` fields) per timed call and per timed ``before_round``, in the
    order they ran, on the clock in microseconds, with the timed round number as
    ``args["round"]``.

Nothing here needs a process group: :class:`Fences` carries the sync, barrier and clocks, so a
test passes its own.
"""

from __future__ import annotations

import functools
import resource
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import torch
import torch.distributed as dist

from distlab._checks import check_bool, check_int
from distlab.cli import progress
from distlab.clock import sync_device, synced_seconds
from distlab.collectives.runtime.rounds import RoundCalibrator

__all__ = ["Fences", "Phases", "Round", "SpanLabels", "Timings", "calibration_round",
           "print_progress", "process_cpu_seconds", "progress_line", "rank_fences", "round_order",
           "timed_rounds"]

C = TypeVar("C")


@dataclass(frozen=True)
class Round:
    """Round ``index`` (from 0, warm-ups counted) of ``total``, the first ``warmup`` untimed."""

    index: int
    total: int
    warmup: int

    @property
    def timed(self) -> bool:
        """Whether this round records (it is not a warm-up)."""
        return self.index >= self.warmup

    @property
    def number(self) -> int | None:
        """The timed round number (``index - warmup``), None for a warm-up."""
        return self.index - self.warmup if self.timed else None


def process_cpu_seconds() -> float:
    """This process's CPU seconds so far, user + system, over every thread
    (``getrusage(RUSAGE_SELF)``): a call's CPU cost wherever its threads ran it."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True)
class Fences:
    """What separates and times the calls: ``sync()`` waits for the device's queued work,
    ``barrier()`` for every rank, ``clock()`` reads seconds after the device's queued work,
    ``thread_clock()`` the calling thread's CPU seconds, ``process_clock()`` the process's
    (:func:`process_cpu_seconds`)."""

    sync: Callable[[], None]
    barrier: Callable[[], None]
    clock: Callable[[], float]
    thread_clock: Callable[[], float] = time.thread_time
    process_clock: Callable[[], float] = process_cpu_seconds


def rank_fences(device: torch.device) -> Fences:
    """The fences of a rank of a live process group whose work runs on ``device``:
    :func:`~distlab.clock.sync_device`, ``torch.distributed.barrier`` and
    :func:`distlab.clock.synced_seconds`."""
    return Fences(sync=functools.partial(sync_device, device), barrier=dist.barrier,
                  clock=functools.partial(synced_seconds, device))


@dataclass(frozen=True)
class SpanLabels(Generic[C]):
    """How the loop names the spans it records: ``case(c) -> (name, category, args)`` for a
    call of case ``c`` (the loop adds ``args["round"]``), ``before_round`` the ``(name,
    category)`` of the per-round hook's span (None: no span for it), all on lane ``lane``."""

    lane: str
    case: Callable[[C], tuple[str, str, dict[str, Any]]]
    before_round: tuple[str, str] | None = None


class Phases:
    """A case's call timing parts of itself: :meth:`now` reads the loop's clock (after the
    device's queued work), :meth:`record` keeps a named duration in timed rounds only."""

    def __init__(self, rnd: Round, clock: Callable[[], float],
                 into: dict[str, list[float]]) -> None:
        self.round = rnd
        self._clock = clock
        self._into = into

    def now(self) -> float:
        """Seconds on the loop's clock."""
        return self._clock()

    def record(self, name: str, seconds: float) -> None:
        """Append ``seconds`` to phase ``name`` of this case, if this round is timed."""
        if self.round.timed:
            self._into.setdefault(name, []).append(seconds)


@dataclass
class Timings:
    """What :func:`timed_rounds` recorded; see the module docstring. Lists per case are in the
    order of the cases given."""

    seconds: list[list[float]]
    cpu_seconds: list[list[float]]
    phases: list[dict[str, list[float]]]
    spans: list[dict[str, Any]] = field(default_factory=list)
    process_cpu_seconds: list[list[float]] = field(default_factory=list)


def round_order(n: int, index: int, *, rotate: bool, group: int = 0) -> list[int]:
    """Positions of ``n`` cases in the order round ``index`` runs them (see the module
    docstring): ``0 .. n-1``, or with ``rotate`` starting at ``index % n``, or with ``rotate``
    and ``group`` > 0 each group of ``group`` consecutive cases rotated on its own."""
    if not rotate or not n:
        return list(range(n))
    if group <= 0:
        k = index % n
        return list(range(k, n)) + list(range(k))
    out = []
    for start in range(0, n, group):
        members = list(range(start, min(start + group, n)))
        k = index % len(members)
        out += members[k:] + members[:k]
    return out


def calibration_round(calibrator: RoundCalibrator | None) -> Callable[[Round], None] | None:
    """The ``before_round`` of the collective benchmarks: one round of ``calibrator``'s
    exchanges, recorded in timed rounds only (None for no calibrator: no hook)."""
    if calibrator is None:
        return None
    return lambda rnd: calibrator.run_round(record=rnd.timed)


def progress_line(label: str, rnd: Round, detail: str = "") -> str:
    """``[label] round i/n`` (1-based), `` (warmup)`` for a warm-up, then ``detail``."""
    return f"[{label}] round {rnd.index + 1}/{rnd.total}{'' if rnd.timed else ' (warmup)'}{detail}"


def print_progress(label: str, detail: str = "") -> Callable[[Round], None]:
    """A ``progress`` for :func:`timed_rounds`: shows :func:`progress_line` through
    :func:`distlab.cli.progress.emit`: on stderr, or inside the progress bar of a command that
    relays them (the profile), so a round line never breaks a bar's line."""
    def show(rnd: Round) -> None:
        progress.emit(progress_line(label, rnd, detail))
    return show


def _span(name: str, category: str, lane: str, t0: float, t1: float,
          args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "category": category, "lane": lane, "start_us": t0 * 1e6,
            "duration_us": (t1 - t0) * 1e6, "args": args}


def timed_rounds(cases: Sequence[C], call: Callable[[C, Phases], None], *, warmup: int,
                 rounds: int, rotate: bool, fences: Fences, group: int = 0,
                 prepare: Callable[[C], None] | None = None,
                 before_round: Callable[[Round], None] | None = None,
                 progress: Callable[[Round], None] | None = None,
                 spans: SpanLabels[C] | None = None, cpu_time: bool = False,
                 process_cpu: bool = False) -> Timings:
    """``warmup`` untimed and ``rounds`` timed rounds of every case (see the module docstring).

    Args:
        cases: what one round runs, each once.
        call: ``call(case, phases)``: the timed work of one case's turn.
        warmup: rounds that run first and record nothing, >= 0.
        rounds: timed rounds, >= 0.
        rotate: rotate the case order from round to round (no default: say why at the call).
        group: with ``rotate``, rotate within consecutive groups of this many cases (0: the
            whole list).
        fences: sync, barrier and clocks (:func:`rank_fences` on a rank).
        prepare: untimed work before each call (refill the case's buffer).
        before_round: run at the start of every round, after ``progress``.
        progress: told each round as it starts.
        spans: record trace spans in timed rounds (None: none).
        cpu_time: also record the thread CPU seconds of each timed call.
        process_cpu: also record the process CPU seconds (every thread, user + system) of
            each timed call.
    """
    check_int("warmup", warmup, minimum=0)
    check_int("rounds", rounds, minimum=0)
    check_bool("rotate", rotate)
    check_int("group", group, minimum=0)
    check_bool("cpu_time", cpu_time)
    check_bool("process_cpu", process_cpu)
    n = len(cases)
    out = Timings([[] for _ in range(n)], [[] for _ in range(n)], [{} for _ in range(n)],
                  process_cpu_seconds=[[] for _ in range(n)])
    total = warmup + rounds
    lane = spans.lane if spans is not None else ""
    for i in range(total):
        rnd = Round(i, total, warmup)
        if progress is not None:
            progress(rnd)
        if before_round is not None:
            hook_span = spans.before_round if spans is not None and rnd.timed else None
            h0 = fences.clock() if hook_span is not None else 0.0
            before_round(rnd)
            if hook_span is not None:
                out.spans.append(_span(*hook_span, lane, h0, fences.clock(),
                                       {"round": rnd.number}))
        for c in round_order(n, i, rotate=rotate, group=group):
            case = cases[c]
            phases = Phases(rnd, fences.clock, out.phases[c])
            if prepare is not None:
                prepare(case)
            fences.sync()
            fences.barrier()
            p0 = fences.process_clock() if process_cpu else 0.0
            c0 = fences.thread_clock() if cpu_time else 0.0
            t0 = fences.clock()
            call(case, phases)
            t1 = fences.clock()
            c1 = fences.thread_clock() if cpu_time else 0.0
            p1 = fences.process_clock() if process_cpu else 0.0
            if not rnd.timed:
                continue
            out.seconds[c].append(t1 - t0)
            if cpu_time:
                out.cpu_seconds[c].append(c1 - c0)
            if process_cpu:
                out.process_cpu_seconds[c].append(p1 - p0)
            if spans is not None:
                name, category, args = spans.case(case)
                out.spans.append(_span(name, category, lane, t0, t1,
                                       {**args, "round": rnd.number}))
    return out
