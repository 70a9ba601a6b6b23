"""Execute a schedule on real ranks over ``torch.distributed`` point-to-point, in place.

    import distlab.collectives as C
    C.all_reduce(t, op="sum", algorithm="ring")          # inside an initialized process group

CPU tensors go over gloo (``isend``/``irecv``, every receive posted before any send so an
exchange cannot deadlock); CUDA tensors over NCCL (each step one ``batch_isend_irecv`` group).
Received ``"reduce"`` data lands in a preallocated workspace and is combined into the tensor
in place (``add_``, ``mul_``, ``maximum``/``minimum`` with ``out=``) as each message arrives
(after this rank's own sends of the same elements have completed);
``"copy"`` data is received straight into the tensor when the rank does not send the same
elements in that step. Every wait has a timeout (``timeout`` seconds, else the process group's),
so a rank that dies mid-collective makes the others raise instead of hanging.
"""

from __future__ import annotations

import datetime
import functools
from typing import Any

import torch
import torch.distributed as dist

from .algorithms import build, check_algorithm
from .ops import check_op, check_op_dtype
from .schedule import Schedule, Transfer

__all__ = ["all_reduce", "run_schedule"]

_WORKSPACE: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}


@functools.lru_cache(maxsize=256)
def _cached_build(algorithm: str, world_size: int, count: int,
                  options: tuple[tuple[str, Any], ...]) -> Schedule:
    return build(algorithm, world_size, count, **dict(options))


def _workspace(numel: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A reusable flat scratch buffer of at least ``numel`` elements (grown, never shrunk)."""
    key = (dtype, device)
    buf = _WORKSPACE.get(key)
    if buf is None or buf.numel() < numel:
        buf = torch.empty(max(numel, 1), dtype=dtype, device=device)
        _WORKSPACE[key] = buf
    return buf


def _reducer(op: str) -> Any:
    if op in ("sum", "avg"):
        return lambda out, x: out.add_(x)
    if op == "prod":
        return lambda out, x: out.mul_(x)
    if op == "max":
        return lambda out, x: torch.maximum(out, x, out=out)
    return lambda out, x: torch.minimum(out, x, out=out)


def _check_tensor(tensor: Any, backend: str) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"tensor must be a torch.Tensor, got {type(tensor).__name__}")
    if not tensor.is_contiguous():
        raise ValueError(f"tensor must be contiguous (got strides {tuple(tensor.stride())} for "
                         f"shape {tuple(tensor.shape)}); call .contiguous() first")
    dev = tensor.device
    if dev.type == "cuda":
        if backend != "nccl":
            raise ValueError(f"tensor is on {dev} but the process group backend is {backend!r}; "
                             "CUDA tensors need a 'nccl' group, CPU tensors a 'gloo' group")
        if dev.index != torch.cuda.current_device():
            raise ValueError(f"tensor is on {dev} but this rank's current device is "
                             f"cuda:{torch.cuda.current_device()}; put each rank's tensor on "
                             "its own device (torch.cuda.set_device)")
    elif dev.type == "cpu":
        if backend == "nccl":
            raise ValueError("tensor is on cpu but the process group backend is 'nccl'; "
                             "CPU tensors need a 'gloo' group, CUDA tensors a 'nccl' group")
    else:
        raise ValueError(f"tensor device {dev} is not supported; use cpu (gloo) or cuda (nccl)")


def _group_info(group: Any) -> tuple[int, int, str]:
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("torch.distributed is not initialized; call "
                           "torch.distributed.init_process_group (or use distlab.launch.run)")
    rank = dist.get_rank(group)
    if rank < 0:
        raise ValueError("this rank is not a member of group; call all_reduce only on its members")
    return rank, dist.get_world_size(group), str(dist.get_backend(group)).lower()


def _peer(group: Any, rank: int) -> int:
    return rank if group is None else dist.get_global_rank(group, rank)


def _overlaps(t: Transfer, others: list[Transfer]) -> bool:
    return any(o.start < t.stop and t.start < o.stop for o in others)


def run_schedule(schedule: Schedule, tensor: torch.Tensor, op: str = "sum", group: Any = None,
                 *, timeline: Any = None, timeout: float | None = None) -> torch.Tensor:
    """Execute ``schedule`` on this rank's ``tensor`` in place and return it.

    Every rank of ``group`` must call it with the same schedule and op. ``timeline`` (a
    :class:`distlab.timeline.Timeline`) gets one span per step on lane ``"rank<r>/allreduce"``
    (on CUDA each step is synchronized first so its span is true device time).
    ``timeout`` (seconds) bounds every wait; ``None`` uses the process group's timeout.
    """
    op = check_op(op)
    if not isinstance(schedule, Schedule):
        raise TypeError(f"schedule must be a Schedule, got {type(schedule).__name__}")
    rank, world, backend = _group_info(group)
    _check_tensor(tensor, backend)
    check_op_dtype(op, tensor.dtype)
    if schedule.world_size != world:
        raise ValueError(f"schedule is for world_size={schedule.world_size} but the group has "
                         f"{world} ranks")
    if schedule.count != tensor.numel():
        raise ValueError(f"schedule is for count={schedule.count} elements but tensor has "
                         f"{tensor.numel()}")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not timeout > 0):
        raise ValueError(f"timeout must be a positive number of seconds or None, got {timeout!r}")
    wait_td = None if timeout is None else datetime.timedelta(seconds=float(timeout))
    flat = tensor.view(-1)
    reduce = _reducer(op)
    nccl = flat.is_cuda
    need = max((sum(t.count for t in s.recvs(rank)) for s in schedule.steps), default=0)
    scratch = _workspace(need, flat.dtype, flat.device) if need else flat
    if timeline is not None:
        from distlab.timeline import now_us
    gr = _peer(group, rank)
    for index, step in enumerate(schedule.steps):
        sends, recvs = step.sends(rank), step.recvs(rank)
        if not sends and not recvs:
            continue
        t0 = now_us() if timeline is not None else 0.0
        targets: list[tuple[Transfer, torch.Tensor, bool]] = []  # (transfer, buffer, via scratch)
        offset = 0
        for t in recvs:
            if t.kind == "copy" and not _overlaps(t, sends):
                targets.append((t, flat[t.start:t.stop], False))
            else:
                targets.append((t, scratch[offset:offset + t.count], True))
                offset += t.count
        tags = {id(t): i for i, t in enumerate(step.transfers)}
        if nccl:
            p2p = [dist.P2POp(dist.irecv, buf, _peer(group, t.src), group, tags[id(t)])
                   for t, buf, _ in targets]
            p2p += [dist.P2POp(dist.isend, flat[t.start:t.stop], _peer(group, t.dst), group,
                               tags[id(t)]) for t in sends]
            works = dist.batch_isend_irecv(p2p)
            recv_works, send_works = works[:len(targets)], works[len(targets):]
            if len(works) != len(p2p):  # coalesced into one work: wait it for everything
                recv_works, send_works = [works[-1]] * len(targets), works
        else:
            recv_works = [dist.irecv(buf, _peer(group, t.src), group=group, tag=tags[id(t)])
                          for t, buf, _ in targets]
            send_works = [dist.isend(flat[t.start:t.stop], _peer(group, t.dst), group=group,
                                     tag=tags[id(t)]) for t in sends]
        try:
            sends_done = False
            for (t, buf, via_scratch), work in zip(targets, recv_works):
                _wait(work, wait_td)
                if not sends_done and _overlaps(t, sends):
                    for w in send_works:  # our own send still reads these elements
                        _wait(w, wait_td)
                    sends_done = True
                if t.kind == "reduce":
                    reduce(flat[t.start:t.stop], buf)
                elif via_scratch:
                    flat[t.start:t.stop].copy_(buf)
            if not sends_done:
                for work in send_works:
                    _wait(work, wait_td)
        except Exception as exc:
            raise RuntimeError(f"all_reduce ({schedule.algorithm}) failed on rank {gr} at step "
                               f"{index} ({step.label}); a peer may have died or timed out: "
                               f"{exc}") from exc
        if timeline is not None:
            if nccl:
                torch.cuda.synchronize(flat.device)
            t1 = now_us()
            timeline.record(f"step {index}", "allreduce", f"rank{gr}/allreduce", t0, t1 - t0, {
                "algorithm": schedule.algorithm, "label": step.label,
                "sent_bytes": sum(t.count for t in sends) * flat.element_size(),
                "recv_bytes": sum(t.count for t in recvs) * flat.element_size(),
                "messages": max(len(sends), len(recvs))})
    if op == "avg":
        flat.div_(world)
    return tensor


def _wait(work: Any, timeout: datetime.timedelta | None) -> None:
    if timeout is None:
        work.wait()
    else:
        work.wait(timeout)


def all_reduce(tensor: torch.Tensor, op: str = "sum", algorithm: str = "ring", group: Any = None,
               *, timeline: Any = None, timeout: float | None = None,
               **options: Any) -> torch.Tensor:
    """Allreduce ``tensor`` in place across ``group`` with the named algorithm; returns it.

    Args:
        tensor: a contiguous tensor, CPU (gloo group) or this rank's CUDA device (NCCL group),
            same shape and dtype on every rank.
        op: ``"sum"``, ``"prod"``, ``"max"``, ``"min"`` or ``"avg"`` (floating dtypes only).
        algorithm: a key of :data:`distlab.collectives.ALGORITHMS`.
        group: a process group, ``None`` for the default (world).
        timeline: optional :class:`distlab.timeline.Timeline`; one span per step.
        timeout: seconds each wait may take (``None``: the process group's timeout).
        **options: algorithm options (``segment_size`` for segmented_ring, ``group_size`` for
            hierarchical).

    Raises:
        TypeError / ValueError: bad arguments (unknown algorithm, non-contiguous tensor, wrong
            device for the backend, avg on integers, group_size not dividing the world size...).
        RuntimeError: not initialized, or a peer failed or timed out during a step.
    """
    op = check_op(op)
    algorithm = check_algorithm(algorithm)
    rank, world, backend = _group_info(group)
    _check_tensor(tensor, backend)
    check_op_dtype(op, tensor.dtype)
    try:
        key = tuple(sorted(options.items()))
        hash(key)
    except TypeError:
        schedule = build(algorithm, world, tensor.numel(), **options)
    else:
        schedule = _cached_build(algorithm, world, tensor.numel(), key)
    return run_schedule(schedule, tensor, op, group, timeline=timeline, timeout=timeout)
