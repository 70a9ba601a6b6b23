"""The collective benchmark's rank code: one driver per collective and the timed rounds.

A :class:`Driver` knows, for one collective, what each rank passes in (:func:`Driver.inputs`,
from :func:`~distlab.bench.allreduce_ranks.fill_pattern`), how to call distlab's function and
torch's built-in on it, and what the exact result is (:func:`Driver.expected`, float64), so
:func:`collective_rank` can check every (size, algorithm) once (``#wrong``) and then time them
in paired rounds next to the calibration exchanges.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

import distlab.collectives.runtime.collectives as RC
from distlab.bench.allreduce_ranks import executor_label, fill_pattern
from distlab.bench.rounds import calibration_round, print_progress, rank_fences, timed_rounds
from distlab.collectives.algorithms.registry import is_builtin
from distlab.collectives.model.calibration import calibration_sizes
from distlab.collectives.runtime.execute import all_reduce
from distlab.collectives.runtime.group import (
    builtin_all_gather,
    builtin_reduce_scatter,
    rank_device,
)
from distlab.collectives.runtime.rounds import RoundCalibrator

__all__ = ["DRIVERS", "Driver", "collective_rank"]

_OPS = {"sum": "SUM", "avg": "SUM", "prod": "PRODUCT", "max": "MAX", "min": "MIN"}


def _redop(op: str) -> Any:
    return getattr(dist.ReduceOp, _OPS[op])


def _combine(xs: list[torch.Tensor], op: str) -> torch.Tensor:
    stack = torch.stack(xs)
    if op in ("sum", "avg"):
        out = stack.sum(0)
        return out / len(xs) if op == "avg" else out
    if op == "prod":
        return stack.prod(0)
    return stack.amax(0) if op == "max" else stack.amin(0)


@dataclass(frozen=True)
class Driver:
    """How one collective is fed, called and checked (``count``: nccl-tests' count)."""

    name: str
    reduces: bool
    rooted: bool

    def input_count(self, count: int, p: int) -> int:
        """Elements of each rank's input tensor."""
        return count // p if self.name in ("gather", "all_gather") else count

    def output_count(self, count: int, p: int) -> int:
        """Elements of each rank's output tensor (0: the collective works in place)."""
        if self.name in ("scatter", "reduce_scatter"):
            return count // p
        return count if self.name in ("gather", "all_gather", "all_to_all") else 0

    def inputs(self, rank: int, p: int, count: int, dtype: str, op: str) -> torch.Tensor:
        """Rank ``rank``'s input (float64 for :meth:`expected`, cast by the caller)."""
        return fill_pattern(rank, self.input_count(count, p), dtype, op)

    def expected(self, rank: int, p: int, count: int, op: str, root: int) -> torch.Tensor | None:
        """The exact result on ``rank`` (``None``: nothing to check there)."""
        c = self.name
        if c == "barrier":
            return None
        xs = [self.inputs(r, p, count, "float64", op) for r in range(p)]
        if c == "all_reduce":
            return _combine(xs, op)
        if c == "broadcast":
            return xs[root]
        if c == "reduce":
            return _combine(xs, op) if rank == root else None
        if c == "gather":
            return torch.cat(xs) if rank == root else None
        if c == "scatter":
            return xs[root].chunk(p)[rank]
        if c == "all_gather":
            return torch.cat(xs)
        if c == "reduce_scatter":
            return _combine(xs, op).chunk(p)[rank]
        return torch.cat([x.chunk(p)[rank] for x in xs])  # all_to_all

    def runner(self, algorithm: str, op: str, root: int, x: torch.Tensor,
               out: torch.Tensor | None, rank: int,
               executor: str = "auto") -> Callable[[], torch.Tensor | None]:
        """A call of ``algorithm`` (``"builtin"``: torch's) on ``x`` (refilled by the caller),
        distlab's on ``executor``; returns this rank's result tensor (``None``: nothing to
        check)."""
        c = self.name
        builtin = is_builtin(c, algorithm)
        kw = {} if builtin else {"algorithm": algorithm, "executor": executor}
        if c == "all_reduce":
            if builtin:
                return lambda: (dist.all_reduce(x, op=_redop(op)), _avg(x, op, rank, None))[1]
            return lambda: all_reduce(x, op=op, **kw)
        if c == "broadcast":
            return lambda: (dist.broadcast(x, src=root) if builtin else
                            RC.broadcast(x, root=root, **kw), x)[1]
        if c == "reduce":
            if builtin:
                return lambda: (dist.reduce(x, dst=root, op=_redop(op)),
                                _avg(x, op, rank, root))[1]
            return lambda: (RC.reduce(x, root=root, op=op, **kw), x if rank == root else None)[1]
        if c == "gather":
            if builtin:
                parts = list(out.chunk(dist.get_world_size())) if rank == root else None
                return lambda: (dist.gather(x, gather_list=parts, dst=root), out)[1]
            return lambda: RC.gather(x, out if rank == root else None, root=root, **kw)
        if c == "scatter":
            if builtin:
                parts = list(x.chunk(dist.get_world_size())) if rank == root else None
                return lambda: (dist.scatter(out, scatter_list=parts, src=root), out)[1]
            return lambda: RC.scatter(out, x if rank == root else None, root=root, **kw)
        if c == "all_gather":
            if builtin:
                return lambda: (builtin_all_gather(out, x), out)[1]
            return lambda: RC.all_gather(out, x, **kw)
        if c == "reduce_scatter":
            if builtin:
                return lambda: (builtin_reduce_scatter(out, x, op=_redop(op)),
                                _avg(out, op, rank, None))[1]
            return lambda: RC.reduce_scatter(out, x, op=op, **kw)
        if c == "all_to_all":
            if builtin:
                return lambda: (dist.all_to_all_single(out, x), out)[1]
            return lambda: RC.all_to_all(out, x, **kw)
        return lambda: (dist.barrier() if builtin else RC.barrier(**kw), None)[1]


def _avg(t: torch.Tensor, op: str, rank: int, root: int | None) -> torch.Tensor | None:
    if op == "avg" and (root is None or rank == root):
        t.div_(dist.get_world_size())
    return t if root is None or rank == root else None


DRIVERS: dict[str, Driver] = {
    c: Driver(c, c in ("all_reduce", "reduce", "reduce_scatter"),
              c in ("broadcast", "reduce", "gather", "scatter"))
    for c in ("all_reduce", "broadcast", "reduce", "gather", "scatter", "all_gather",
              "reduce_scatter", "all_to_all", "barrier")}


def _tolerance(dtype: str, op: str) -> float:
    return 0.0 if op != "avg" else {"float16": 1e-2, "bfloat16": 2e-2}.get(dtype, 1e-6)


def collective_rank(rank: int, world_size: int, collective: str, sizes: Sequence[int],
                    algorithms: Sequence[str], dtype: str = "float32", op: str = "sum",
                    root: int = 0, iters: int = 9, warmup: int = 2, calibrate: bool = True,
                    progress: bool = True, executor: str = "auto") -> dict[str, Any]:
    """One rank of ``python -m distlab.bench collective`` (a :func:`distlab.launch.run` rank
    function): per size (bytes of nccl-tests' count) and algorithm (``"builtin"``: torch's),
    one checked call, then ``warmup`` + ``iters`` rounds that run every case once each, in an
    order rotating from round to round, each after a barrier on refilled inputs, next to the
    calibration exchanges. Returns ``{"cases": [{"nbytes", "count", "algorithm", "executor",
    "seconds", "wrong"}], "calibration": dict | None, "host": str}``."""
    drv = DRIVERS[collective]
    device = rank_device()
    tdtype = getattr(torch, dtype)
    itemsize = torch.empty(0, dtype=tdtype).element_size()
    cases = []
    for nbytes in sizes if collective != "barrier" else [0]:  # a barrier has no size
        count = nbytes // itemsize - (nbytes // itemsize) % world_size
        pristine = drv.inputs(rank, world_size, count, dtype, op).to(device)
        want = drv.expected(rank, world_size, count, op, root)
        for algo in algorithms:
            x = pristine.clone()
            n_out = drv.output_count(count, world_size)
            out = torch.empty(n_out, dtype=tdtype, device=device) if n_out else None
            run = drv.runner(algo, op, root, x, out, rank, executor)
            got = run()
            wrong = 0
            if want is not None and got is not None:
                wrong = int((~torch.isclose(got.double().cpu(), want,
                                            rtol=_tolerance(dtype, op), atol=0.0)).sum())
            elif want is not None:
                wrong = want.numel()
            cases.append({"nbytes": count * itemsize, "count": count, "algorithm": algo,
                          "executor": executor_label(algo, executor, collective),
                          "seconds": [], "wrong": wrong, "run": run, "x": x,
                          "pristine": pristine})
    calibrator = None
    if calibrate and world_size >= 2:
        cal_sizes = calibration_sizes([max(c["nbytes"], 4096) for c in cases], world_size,
                                      itemsize)
        calibrator = RoundCalibrator(cal_sizes, tdtype, "sum" if op == "avg" else op,
                                     device=device, check=True)
    # rotate: the cases of one round are compared with each other (paired by round), so each
    # goes first in turn and a burst of load falls on all of them alike
    timings = timed_rounds(
        cases, lambda c, _: c["run"](), warmup=warmup, rounds=iters, rotate=True,
        fences=rank_fences(device), prepare=lambda c: c["x"].copy_(c["pristine"]),
        before_round=calibration_round(calibrator),
        progress=print_progress(f"collective {collective}") if progress and rank == 0 else None)
    for case, seconds in zip(cases, timings.seconds, strict=True):
        case["seconds"] = seconds
    keep = ("nbytes", "count", "algorithm", "executor", "seconds", "wrong")
    return {"cases": [{k: c[k] for k in keep} for c in cases],
            "calibration": calibrator.fit().to_dict() if calibrator is not None else None,
            "host": socket.gethostname()}
