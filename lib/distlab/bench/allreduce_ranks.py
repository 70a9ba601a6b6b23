"""The allreduce benchmark's rank code: what every rank runs under :func:`distlab.launch.run`.

:func:`bench_rank` checks each (size, algorithm) once against the exact answer, then runs the
timed rounds (every size and algorithm once per round, each after a barrier, next to the
calibration exchanges of :class:`~distlab.collectives.runtime.rounds.RoundCalibrator`) and
returns this rank's raw seconds; :mod:`distlab.bench.allreduce` turns every rank's into rows.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from distlab.bench.rounds import (
    SpanLabels,
    calibration_round,
    print_progress,
    rank_fences,
    timed_rounds,
)
from distlab.collectives.algorithms.registry import is_builtin, options_of
from distlab.collectives.model.calibration import calibration_sizes
from distlab.collectives.runtime import compiled
from distlab.collectives.runtime.execute import all_reduce
from distlab.collectives.runtime.group import builtin_all_reduce, rank_device
from distlab.collectives.runtime.rounds import RoundCalibrator, calibrate
from distlab.report.words import count
from distlab.vocabulary import size_label

__all__ = ["bench_rank", "expected_result", "fill_pattern", "size_pattern",
           "slowest_rank_mean", "slowest_rank_median", "summed_ranks_median"]


def fill_pattern(rank: int, count: int, dtype: str, op: str) -> torch.Tensor:
    """Rank ``rank``'s deterministic input: small integers, so sums and products are exact.

    ``prod`` uses values in {1, 2} (a product over 8 ranks stays <= 256); other ops values
    in 0..3 (a sum over 8 ranks stays <= 24, exact even in float16 and bfloat16).
    """
    i = torch.arange(count, dtype=torch.int64)
    vals = 1 + (i + rank) % 2 if op == "prod" else (i * 7 + rank * 3) % 4
    return vals.to(getattr(torch, dtype))


def expected_result(world_size: int, count: int, dtype: str, op: str) -> torch.Tensor:
    """The exact allreduce of :func:`fill_pattern` over ``world_size`` ranks (float64)."""
    stack = torch.stack([fill_pattern(r, count, "float64", op) for r in range(world_size)])
    if op in ("sum", "avg"):
        out = stack.sum(0)
        return out / world_size if op == "avg" else out
    if op == "prod":
        return stack.prod(0)
    return stack.amax(0) if op == "max" else stack.amin(0)


def size_pattern(rank: int, world_size: int, nbytes: int, dtype: str, op: str,
                 device: torch.device) -> tuple[int, torch.Tensor, torch.Tensor]:
    """``(count, pristine, expected)`` of one size of a sweep: ``count = nbytes // itemsize``
    elements, this rank's :func:`fill_pattern` on ``device`` and the exact allreduce
    (:func:`expected_result`, float64, on the CPU)."""
    count = nbytes // torch.empty(0, dtype=getattr(torch, dtype)).element_size()
    return (count, fill_pattern(rank, count, dtype, op).to(device),
            expected_result(world_size, count, dtype, op))


def slowest_rank_median(per_rank: Sequence[Sequence[float]]) -> float:
    """Median over rounds of the slowest rank's seconds (``per_rank[r][round]``)."""
    return float(np.median(np.asarray(per_rank, dtype=float).max(axis=0)))


def slowest_rank_mean(per_rank: Sequence[Sequence[float]]) -> float:
    """Mean over rounds of the slowest rank's seconds (``per_rank[r][round]``)."""
    return float(np.mean(np.asarray(per_rank, dtype=float).max(axis=0)))


def summed_ranks_median(per_rank: Sequence[Sequence[float]]) -> float:
    """Median over rounds of the sum over ranks (``per_rank[r][round]``): a call's CPU seconds
    over every rank, each round counted once."""
    return float(np.median(np.asarray(per_rank, dtype=float).sum(axis=0)))


def _tolerance(dtype: str, op: str) -> float:
    if op != "avg":
        return 0.0
    return {"float16": 1e-2, "bfloat16": 2e-2, "float32": 1e-6}.get(dtype, 1e-12)


@dataclass
class _Case:
    """One (size, algorithm) of the sweep: its buffer, pristine input and timed seconds."""

    algorithm: str
    executor: str
    count: int
    nbytes: int
    run: Callable[[torch.Tensor], Any]
    buf: torch.Tensor
    pristine: torch.Tensor
    wrong: int = 0
    seconds: list[float] = field(default_factory=list)
    cpu_seconds: list[float] = field(default_factory=list)


def _runner(algorithm: str, op: str, options: dict[str, Any],
            executor: str = "auto") -> Callable[..., Any]:
    if is_builtin("all_reduce", algorithm):
        return lambda t, check=True: builtin_all_reduce(t, op)
    opts = {k: v for k, v in options.items() if k in options_of(algorithm) and v is not None}
    return lambda t, check=True: all_reduce(t, op=op, algorithm=algorithm, check=check,
                                            executor=executor, **opts)


def executor_label(algorithm: str, executor: str, collective: str = "all_reduce") -> str:
    """What runs ``collective``'s ``algorithm`` under ``executor`` here: ``"builtin"`` (the
    backend's own), ``"compiled"`` or ``"python"`` (``"auto"`` resolved: compiled where it
    builds)."""
    return "builtin" if is_builtin(collective, algorithm) else compiled.resolved(executor)


def _checked_cases(rank: int, world_size: int, sizes: Sequence[int], algorithms: Sequence[str],
                   dtype: str, op: str, options: dict[str, Any],
                   device: torch.device, executors: Sequence[str] = ("auto",)) -> list[_Case]:
    """Every (size, algorithm, executor), run once on the pattern with the peer check and
    compared with the exact answer (``wrong`` = this rank's elements that differ); the builtin
    once per size."""
    itemsize = torch.empty(0, dtype=getattr(torch, dtype)).element_size()
    runs = []
    for algo in algorithms:
        labels = {executor_label(algo, ex): ex for ex in executors}  # auto == compiled: once
        runs += [(algo, label, ex) for label, ex in labels.items()]
    cases = []
    for nbytes in sizes:
        count, pristine, expected = size_pattern(rank, world_size, nbytes, dtype, op, device)
        buf = pristine.clone()
        for algo, label, ex in runs:
            case = _Case(algo, label, count, count * itemsize, _runner(algo, op, options, ex),
                         buf, pristine)
            buf.copy_(pristine)
            case.run(buf, check="gather")  # the checked run also verifies every rank agrees
            got = buf.double().cpu()
            case.wrong = int((~torch.isclose(got, expected, rtol=_tolerance(dtype, op),
                                             atol=0.0)).sum())
            cases.append(case)
    return cases


def _timed_rounds(rank: int, cases: list[_Case], calibrator: RoundCalibrator | None,
                  iters: int, warmup: int, device: torch.device,
                  progress: bool, check: str = "inline") -> list[dict[str, Any]]:
    """``warmup`` + ``iters`` rounds of every case (and the calibration); sets each case's
    seconds and this process's CPU seconds (user + system, every thread) per timed round;
    returns one span per timed call and calibration round.

    Every round runs the sizes small to large and, per size, every algorithm once, each size's
    algorithms rotated from round to round (``rotate=True, group=`` algorithms per size) so each
    comes first in turn: the first call at a new size runs slower (on 4 gloo ranks sharing 2
    cores, 15-20% at 16 MiB whichever algorithm it is), and a fixed order gave that cost to the
    same algorithm every round (the first given; the builtin, listed last, never paid it)."""
    detail = (f": {count(len({c.nbytes for c in cases}), 'size')} x "
              f"{count(len({c.algorithm for c in cases}), 'algorithm')}")
    timings = timed_rounds(
        cases, lambda c, _: c.run(c.buf, check=check), warmup=warmup, rounds=iters,
        rotate=True, group=len(cases) // max(1, len({c.nbytes for c in cases})),
        fences=rank_fences(device),
        prepare=lambda c: c.buf.copy_(c.pristine),  # repeated sums/products would overflow
        before_round=calibration_round(calibrator),
        progress=print_progress("allreduce", detail) if progress and rank == 0 else None,
        spans=SpanLabels(f"rank{rank}/allreduce", _case_span,
                         ("calibration exchanges", "calibration")),
        process_cpu=True)
    for case, seconds, cpu in zip(cases, timings.seconds, timings.process_cpu_seconds,
                                  strict=True):
        case.seconds, case.cpu_seconds = seconds, cpu
    return timings.spans


def _case_span(case: _Case) -> tuple[str, str, dict[str, Any]]:
    return (f"{case.algorithm} {size_label(case.nbytes)}", "allreduce",
            {"algorithm": case.algorithm, "executor": case.executor, "bytes": case.nbytes})


def bench_rank(rank: int, world_size: int, sizes: Sequence[int], algorithms: Sequence[str],
               dtype: str = "float32", op: str = "sum", iters: int = 20, warmup: int = 5,
               options: dict[str, Any] | None = None,
               calibration: dict[str, Any] | None = None,
               progress: bool = True, calibrate_in_rounds: bool = True,
               executors: Sequence[str] = ("auto",), check: str = "inline") -> dict[str, Any]:
    """Time each algorithm (``"builtin"`` = ``torch.distributed.all_reduce``) at each size.

    Per size: one checked run per algorithm on :func:`fill_pattern` data (``wrong`` = elements
    differing from :func:`expected_result` on this rank; it also runs the per-call peer check).
    Then ``warmup`` untimed and ``iters`` timed rounds (timed runs are the default call with
    the peer check ``check``, ``"inline"`` as a call does by default, and the ``pieces`` the
    shipped cost model picks where the algorithm takes it): a round runs every size and
    algorithm once (each size's algorithms in a rotated order), each after a barrier on a
    buffer refilled with the pattern (outside the timed region) and, when ``calibration`` is
    given (a dict that may set the calibrator's ``sizes``, ``chain``, ``op`` and the ``statistic``
    its fit summarizes rounds by), the calibration
    exchanges, fitted on the same rounds at the end; with ``calibrate_in_rounds=False`` the same
    calibrator runs before the rounds instead. Under NCCL the buffers live on this rank's GPU
    and each timed run ends with a device synchronize.

    Returns ``{"calibration": dict | None, "rows": [...], "spans": [...], "host": str}``: rows of
    (algorithm, nbytes, count, this rank's seconds per round, this process's CPU seconds per
    round (``getrusage``: user + system of every thread), wrong); spans one per timed call
    and calibration round on this host's :func:`~distlab.timeline.now_us` clock, lane
    ``"rank<r>/allreduce"`` (spans of ranks on other hosts are on another clock).
    """
    device = rank_device()
    tdtype = getattr(torch, dtype)
    itemsize = torch.empty(0, dtype=tdtype).element_size()
    calibrator = None
    cal = None
    if calibration is not None and world_size >= 2:
        cal_sizes = calibration.get("sizes") or calibration_sizes(sizes, world_size, itemsize)
        cal_op, chain = calibration.get("op", "sum"), calibration.get("chain", 4)
        statistic = calibration.get("statistic", "median")
        if calibrate_in_rounds:
            calibrator = RoundCalibrator(cal_sizes, tdtype, cal_op, chain=chain, device=device,
                                         check=True)
        else:
            cal = calibrate(cal_sizes, iters=iters, warmup=warmup, dtype=tdtype, op=cal_op,
                            chain=chain, device=device, statistic=statistic).to_dict()
    cases = _checked_cases(rank, world_size, sizes, algorithms, dtype, op, options or {},
                           device, executors)
    spans = _timed_rounds(rank, cases, calibrator, iters, warmup, device, progress, check)
    if calibrator is not None:
        cal = calibrator.fit(statistic=statistic).to_dict()
    rows = [{"algorithm": c.algorithm, "executor": c.executor, "nbytes": c.nbytes,
             "count": c.count, "seconds": c.seconds, "cpu_seconds": c.cpu_seconds,
             "wrong": c.wrong} for c in cases]
    return {"calibration": cal, "rows": rows, "spans": spans, "host": socket.gethostname()}
