"""Every MPI collective on real ranks, as torch.distributed's built-ins are called, run as plans.

    import distlab.collectives as C
    C.broadcast(t, root=0)                          # torch.distributed.broadcast(t, src=0)
    C.reduce(t, root=0, op="sum")                   # torch.distributed.reduce(t, dst=0)
    C.gather(t, out, root=0)                        # torch.distributed.gather, one output tensor
    C.scatter(out, t, root=0)                       # torch.distributed.scatter, one input tensor
    C.all_gather(out, t)                            # all_gather_into_tensor(out, t)
    C.reduce_scatter(out, t, op="sum")              # reduce_scatter_tensor(out, t)
    C.all_to_all(out, t)                            # all_to_all_single(out, t), equal splits
    C.barrier()

Each call builds its collective's schedule (:mod:`distlab.collectives.algorithms.registry`;
``algorithm=None`` is :data:`~distlab.collectives.algorithms.registry.DEFAULT_ALGORITHM`) over the
buffer of :mod:`distlab.collectives.plan.semantics` and runs it with the one executor
(:func:`distlab.collectives.runtime.execute.execute`, with its peer check, tags and timeouts). The
buffer is the caller's tensor where it can be (broadcast, reduce, the root's gather output,
all-gather's output); otherwise a reused workspace, with the input as the executor's read-only
*source* (never modified, never copied up front: elements are read from it until first written), and
the result copied out of the buffer at the end. ``executor`` picks the compiled or the Python
executor as :func:`~distlab.collectives.runtime.execute.run_schedule` does (default ``"auto"``:
compiled for an untraced call where it can be built). ``pieces`` left unset on a ring is the
model's choice (:func:`distlab.collectives.model.choice.best_pieces`). ``avg`` sums, then
divides the result.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import torch

from distlab.collectives.algorithms.registry import (
    DEFAULT_ALGORITHM,
    build_plan,
    check_plan_algorithm,
    plan_options,
)
from distlab.collectives.model.choice import best_pieces
from distlab.collectives.plan.ops import check_op
from distlab.collectives.plan.schedule import Schedule
from distlab.collectives.plan.semantics import layout
from distlab.collectives.runtime.execute import check_tensor_alone, check_timeout, execute
from distlab.collectives.runtime.group import check_tensor_backend, group_info, rank_device
from distlab.collectives.runtime.peercheck import check_mode
from distlab.collectives.runtime.steps import StepRunner, workspace
from distlab.timeline import Timeline

__all__ = ["all_gather", "all_to_all", "barrier", "broadcast", "gather", "plan_for",
           "reduce", "reduce_scatter", "scatter"]


@functools.lru_cache(maxsize=256)
def _cached_plan(collective: str, algorithm: str, world: int, count: int,
                 options: tuple[tuple[str, Any], ...]) -> Schedule:
    return build_plan(collective, algorithm, world, count, **dict(options))


def plan_for(collective: str, algorithm: str | None, world: int, count: int, itemsize: int,
             options: dict[str, Any]) -> Schedule:
    """The schedule a call runs: the default algorithm if none is named, an unset ``pieces``
    chosen by the cost model, built once per distinct call (cached)."""
    c, a = check_plan_algorithm(collective, DEFAULT_ALGORITHM[collective]
                                if algorithm is None else algorithm)
    opts = {k: v for k, v in options.items() if v is not None}
    if "pieces" in plan_options(c, a) and "pieces" not in opts and world > 1:
        opts["pieces"] = best_pieces(a, world, count, itemsize, collective=c,
                                     options=opts or None)
    try:
        return _cached_plan(c, a, world, count, tuple(sorted(opts.items())))
    except TypeError:  # an unhashable option: build without the cache
        return build_plan(c, a, world, count, **opts)


def _tensor(t: Any, name: str, op: str, backend: str) -> torch.Tensor:
    check_tensor_alone(t, op, name)
    check_tensor_backend(t, backend)
    return t.view(-1)


def _same_kind(a: torch.Tensor, b: torch.Tensor, names: str) -> None:
    if a.dtype != b.dtype or a.device != b.device:
        raise ValueError(f"{names} must have the same dtype and device, got {a.dtype} on "
                         f"{a.device} and {b.dtype} on {b.device}")


def _run(collective: str, algorithm: str | None, count: int, buf: torch.Tensor, op: str,
         group: Any, rank: int, world: int, options: dict[str, Any], *,
         source: tuple[torch.Tensor, tuple[int, int]] | None, timeline: Timeline | None,
         timeout: float | None, batched: bool | None, check: bool | str,
         executor: str = "auto") -> StepRunner:
    """Build (or reuse) the plan and execute it on ``buf``."""
    schedule = plan_for(collective, algorithm, world, count, buf.element_size(), options)
    if schedule.count != buf.numel():
        raise ValueError(f"{collective}: buffer has {buf.numel()} elements, plan expects "
                         f"{schedule.count}")  # a bug of this module, not of the caller
    return execute(schedule, buf, op, group, rank, world, check_timeout(timeout),
                   timeline=timeline, batched=buf.is_cuda if batched is None else bool(batched),
                   check=check_mode(check), source=source, executor=executor)


def _copy_out(runner: StepRunner, buf: torch.Tensor, source: torch.Tensor | None, at: int,
              spans: list[tuple[int, int]], out: torch.Tensor | None) -> None:
    """Copy the buffer ranges ``spans`` (in order) into ``out``; elements the steps never wrote
    come from the source (starting at buffer index ``at``). ``out=None``: the result stays in
    ``buf``, and only those elements are filled in from the source."""
    untouched = runner.plan.untouched
    pos = 0
    for a, b in spans:
        cuts = sorted({a, b} | {x for lo, hi in untouched for x in (lo, hi) if a < x < b})
        for lo, hi in itertools.pairwise(cuts):
            inside = source is not None and any(u0 <= lo and hi <= u1 for u0, u1 in untouched)
            if out is None:
                if inside:
                    buf[lo:hi].copy_(source[lo - at:hi - at])  # type: ignore[index]
                continue
            src = source[lo - at:hi - at] if inside else buf[lo:hi]  # type: ignore[index]
            out[pos + lo - a:pos + hi - a].copy_(src)
        pos += b - a


def _avg(t: torch.Tensor, op: str, world: int) -> None:
    if op == "avg":
        t.div_(world)


def broadcast(tensor: torch.Tensor, root: int = 0, group: Any = None, *,
              algorithm: str | None = None, timeline: Timeline | None = None,
              timeout: float | None = None, batched: bool | None = None,
              check: bool | str = True, executor: str = "auto",
              **options: Any) -> torch.Tensor:
    """``root``'s ``tensor`` into every rank's ``tensor`` (in place); returns it. Algorithms:
    ``binomial``, ``scatter_allgather`` (default)."""
    rank, world, backend = group_info(group)
    flat = _tensor(tensor, "tensor", "sum", backend)
    _run("broadcast", algorithm, flat.numel(), flat, "sum", group, rank, world,
         {**options, "root": root}, source=None, timeline=timeline, timeout=timeout,
         batched=batched, check=check, executor=executor)
    return tensor


def reduce(tensor: torch.Tensor, root: int = 0, op: str = "sum", group: Any = None, *,
           algorithm: str | None = None, timeline: Timeline | None = None,
           timeout: float | None = None, batched: bool | None = None,
           check: bool | str = True, executor: str = "auto",
              **options: Any) -> torch.Tensor:
    """Every rank's ``tensor`` reduced into ``root``'s ``tensor`` (in place; other ranks'
    tensors are left holding partial results, as the built-in allows); returns it. Algorithms:
    ``binomial``, ``rabenseifner`` (default)."""
    op = check_op(op)
    rank, world, backend = group_info(group)
    flat = _tensor(tensor, "tensor", op, backend)
    _run("reduce", algorithm, flat.numel(), flat, op, group, rank, world,
         {**options, "root": root}, source=None, timeline=timeline, timeout=timeout,
         batched=batched, check=check, executor=executor)
    if rank == root:
        _avg(flat, op, world)
    return tensor


def gather(tensor: torch.Tensor, output: torch.Tensor | None = None, root: int = 0,
           group: Any = None, *, algorithm: str | None = None,
           timeline: Timeline | None = None, timeout: float | None = None,
           batched: bool | None = None, check: bool | str = True,
           executor: str = "auto", **options: Any) -> torch.Tensor | None:
    """Every rank's ``tensor`` into block ``r`` of ``root``'s ``output`` (``p`` times its
    size; only the root passes one); returns ``output`` on the root, ``None`` elsewhere.
    Algorithms: ``binomial`` (default), ``linear``."""
    rank, world, backend = group_info(group)
    x = _tensor(tensor, "tensor", "sum", backend)
    m = x.numel()
    lay = layout("gather", world, m * world, root)
    if rank == lay.root:
        if output is None:
            raise ValueError(f"output must be given on the root (rank {root}): a tensor of "
                             f"{world} x {m} elements")
        out = _tensor(output, "output", "sum", backend)
        _same_kind(x, out, "tensor and output")
        if out.numel() != world * m:
            raise ValueError(f"output must have world_size x tensor.numel() = {world * m} "
                             f"elements, got {out.numel()}")
        buf = out
    else:
        buf = workspace(world * m, x.dtype, x.device, "buffer")[:world * m]
    span = lay.inputs(rank)[0] if m else (0, 0)
    runner = _run("gather", algorithm, world * m, buf, "sum", group, rank, world,
                  {**options, "root": root}, source=(x, span), timeline=timeline,
                  timeout=timeout, batched=batched, check=check, executor=executor)
    if rank != lay.root:
        return None
    if m:
        _copy_out(runner, buf, x, span[0], [span], None)
    return output


def scatter(tensor: torch.Tensor, input: torch.Tensor | None = None, root: int = 0,
            group: Any = None, *, algorithm: str | None = None,
            timeline: Timeline | None = None, timeout: float | None = None,
            batched: bool | None = None, check: bool | str = True,
            executor: str = "auto", **options: Any) -> torch.Tensor:
    """Block ``r`` of ``root``'s ``input`` (``p`` times ``tensor``'s size; only the root passes
    one) into every rank ``r``'s ``tensor``; returns ``tensor``. Algorithms: ``binomial``
    (default), ``linear``."""
    rank, world, backend = group_info(group)
    out = _tensor(tensor, "tensor", "sum", backend)
    m = out.numel()
    lay = layout("scatter", world, m * world, root)
    source = None
    if rank == lay.root:
        if input is None:
            raise ValueError(f"input must be given on the root (rank {root}): a tensor of "
                             f"{world} x {m} elements")
        x = _tensor(input, "input", "sum", backend)
        _same_kind(x, out, "tensor and input")
        if x.numel() != world * m:
            raise ValueError(f"input must have world_size x tensor.numel() = {world * m} "
                             f"elements, got {x.numel()}")
        source = (x, (0, world * m))
    buf = workspace(world * m, out.dtype, out.device, "buffer")[:world * m]
    runner = _run("scatter", algorithm, world * m, buf, "sum", group, rank, world,
                  {**options, "root": root}, source=source, timeline=timeline,
                  timeout=timeout, batched=batched, check=check, executor=executor)
    if m:
        _copy_out(runner, buf, None if source is None else source[0], 0, lay.outputs(rank), out)
    return tensor


def all_gather(output: torch.Tensor, tensor: torch.Tensor, group: Any = None, *,
               algorithm: str | None = None, timeline: Timeline | None = None,
               timeout: float | None = None, batched: bool | None = None,
               check: bool | str = True, executor: str = "auto",
              **options: Any) -> torch.Tensor:
    """Every rank's ``tensor`` into block ``r`` of every rank's ``output`` (``p`` times its
    size), as ``all_gather_into_tensor``; returns ``output``. Algorithms: ``ring`` (default),
    ``recursive_doubling``, ``bruck``."""
    rank, world, backend = group_info(group)
    x = _tensor(tensor, "tensor", "sum", backend)
    out = _tensor(output, "output", "sum", backend)
    _same_kind(x, out, "output and tensor")
    m = x.numel()
    if out.numel() != world * m:
        raise ValueError(f"output must have world_size x tensor.numel() = {world * m} "
                         f"elements, got {out.numel()}")
    span = (rank * m, (rank + 1) * m)
    runner = _run("all_gather", algorithm, world * m, out, "sum", group, rank, world, options,
                  source=(x, span), timeline=timeline, timeout=timeout, batched=batched,
                  check=check, executor=executor)
    if m:
        _copy_out(runner, out, x, span[0], [span], None)
    return output


def reduce_scatter(output: torch.Tensor, tensor: torch.Tensor, op: str = "sum",
                   group: Any = None, *, algorithm: str | None = None,
                   timeline: Timeline | None = None, timeout: float | None = None,
                   batched: bool | None = None, check: bool | str = True,
                   executor: str = "auto", **options: Any) -> torch.Tensor:
    """Block ``r`` of every rank's ``tensor`` (``p`` times ``output``'s size), reduced over the
    ranks, into rank ``r``'s ``output``, as ``reduce_scatter_tensor``; ``tensor`` is left as
    it was; returns ``output``. Algorithms: ``ring`` (default), ``pairwise``,
    ``recursive_halving``."""
    op = check_op(op)
    rank, world, backend = group_info(group)
    x = _tensor(tensor, "tensor", op, backend)
    out = _tensor(output, "output", op, backend)
    _same_kind(x, out, "output and tensor")
    m = out.numel()
    if x.numel() != world * m:
        raise ValueError(f"tensor must have world_size x output.numel() = {world * m} "
                         f"elements, got {x.numel()}")
    buf = workspace(world * m, x.dtype, x.device, "buffer")[:world * m]
    runner = _run("reduce_scatter", algorithm, world * m, buf, op, group, rank, world, options,
                  source=(x, (0, world * m)), timeline=timeline, timeout=timeout,
                  batched=batched, check=check, executor=executor)
    if m:
        _copy_out(runner, buf, x, 0, [(rank * m, (rank + 1) * m)], out)
        _avg(out, op, world)
    return output


def all_to_all(output: torch.Tensor, tensor: torch.Tensor, group: Any = None, *,
               algorithm: str | None = None, timeline: Timeline | None = None,
               timeout: float | None = None, batched: bool | None = None,
               check: bool | str = True, executor: str = "auto",
              **options: Any) -> torch.Tensor:
    """Block ``d`` of every rank ``s``'s ``tensor`` into block ``s`` of rank ``d``'s ``output``
    (``p`` equal blocks each), as ``all_to_all_single`` with equal splits; returns ``output``.
    Algorithms: ``pairwise`` (default), ``bruck``."""
    rank, world, backend = group_info(group)
    x = _tensor(tensor, "tensor", "sum", backend)
    out = _tensor(output, "output", "sum", backend)
    _same_kind(x, out, "output and tensor")
    n = x.numel()
    if n % world or out.numel() != n:
        raise ValueError(f"tensor and output must have the same number of elements, a multiple "
                         f"of world_size={world}, got {n} and {out.numel()}")
    lay = layout("all_to_all", world, n)
    buf = workspace(lay.buffer, x.dtype, x.device, "buffer")[:lay.buffer]
    span = (rank * n, (rank + 1) * n)
    runner = _run("all_to_all", algorithm, n, buf, "sum", group, rank, world, options,
                  source=(x, span), timeline=timeline, timeout=timeout, batched=batched,
                  check=check, executor=executor)
    if n:
        _copy_out(runner, buf, x, span[0], lay.outputs(rank), out)
    return output


def barrier(group: Any = None, *, algorithm: str | None = None,
            timeline: Timeline | None = None, timeout: float | None = None,
            batched: bool | None = None, check: bool | str = True,
            executor: str = "auto") -> None:
    """Return on no rank before every rank of ``group`` has called it. Algorithm:
    ``dissemination`` (default)."""
    rank, world, _ = group_info(group)
    token = torch.ones(1, dtype=torch.int32, device=rank_device(group))
    _run("barrier", algorithm, 1, token, "max", group, rank, world, {}, source=None,
         timeline=timeline, timeout=timeout, batched=batched, check=check, executor=executor)
