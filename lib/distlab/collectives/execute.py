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
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from distlab._checks import check_bool

from .algorithms import build, check_algorithm
from .ops import check_op, check_op_dtype
from .peercheck import CollectiveMismatchError, check_peers, describe
from .schedule import Schedule, Transfer

__all__ = ["RankPlan", "RankStep", "all_reduce", "rank_plan", "run_schedule", "step_p2p_ops"]

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


def _check_tensor_alone(tensor: Any, op: str) -> None:
    """Checks that need no process group: type, contiguity, op/dtype."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"tensor must be a torch.Tensor, got {type(tensor).__name__}")
    if not tensor.is_contiguous():
        raise ValueError(f"tensor must be contiguous (got strides {tuple(tensor.stride())} for "
                         f"shape {tuple(tensor.shape)}); call .contiguous() first")
    check_op_dtype(op, tensor.dtype)


def _check_tensor(tensor: torch.Tensor, backend: str) -> None:
    """The tensor's device must match the group's backend (cpu: gloo, this rank's cuda: nccl).

    ``backend`` is ``dist.get_backend(group)`` lower-cased; a group created with both
    (``"cpu:gloo,cuda:nccl"``) takes either device.
    """
    dev = tensor.device
    if dev.type == "cuda":
        if "nccl" not in backend:
            raise ValueError(f"tensor is on {dev} but the process group backend is {backend!r}; "
                             "CUDA tensors need a 'nccl' group, CPU tensors a 'gloo' group")
        if dev.index != torch.cuda.current_device():
            raise ValueError(f"tensor is on {dev} but this rank's current device is "
                             f"cuda:{torch.cuda.current_device()}; put each rank's tensor on "
                             "its own device (torch.cuda.set_device)")
    elif dev.type == "cpu":
        if "gloo" not in backend:
            raise ValueError(f"tensor is on cpu but the process group backend is {backend!r}; "
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


@dataclass(frozen=True)
class RankStep:
    """One step as one rank executes it (precomputed from the schedule, reused every call).

    ``sends``: ``(start, stop, dst, tag)``; ``recvs``: ``(start, stop, src, tag, kind,
    scratch_offset)`` where ``scratch_offset`` is ``None`` when the data lands straight in the
    tensor; ``sends_first_needed``: index of the first receive whose elements this rank also
    sends in this step (its own sends must finish before those elements change), or
    ``len(recvs)``. Ranks are group ranks.
    """

    index: int
    label: str
    sends: tuple[tuple[int, int, int, int], ...]
    recvs: tuple[tuple[int, int, int, int, str, int | None], ...]
    sends_first_needed: int


@dataclass(frozen=True)
class RankPlan:
    """A rank's steps (those where it sends or receives) and its scratch size in elements."""

    steps: tuple[RankStep, ...]
    scratch: int


@functools.lru_cache(maxsize=512)
def rank_plan(schedule: Schedule, rank: int) -> RankPlan:
    """What ``rank`` does in each step of ``schedule``: the executor's precomputed view."""
    steps, scratch = [], 0
    for index, step in enumerate(schedule.steps):
        sends, recvs = step.sends(rank), step.recvs(rank)
        if not sends and not recvs:
            continue
        tags = {id(t): i for i, t in enumerate(step.transfers)}
        out, offset, first = [], 0, len(recvs)
        for i, t in enumerate(recvs):
            overlap = _overlaps(t, sends)
            if overlap and first == len(recvs):
                first = i
            if t.kind == "copy" and not overlap:
                out.append((t.start, t.stop, t.src, tags[id(t)], t.kind, None))
            else:
                out.append((t.start, t.stop, t.src, tags[id(t)], t.kind, offset))
                offset += t.count
        scratch = max(scratch, offset)
        steps.append(RankStep(index, step.label,
                              tuple((t.start, t.stop, t.dst, tags[id(t)]) for t in sends),
                              tuple(out), first))
    return RankPlan(tuple(steps), scratch)


def step_p2p_ops(rs: RankStep, flat: torch.Tensor, bufs: list[torch.Tensor],
                 peer: Any = None) -> list[tuple[str, torch.Tensor, int, int]]:
    """The point-to-point operations of one step, in the order they are posted as one batch.

    Returns ``(kind, tensor, peer, tag)`` with ``kind`` ``"recv"`` or ``"send"``: every receive
    of the step (into ``bufs``, one per ``rs.recvs``) before every send (slices of ``flat``),
    which is what one ``batch_isend_irecv`` (one ``ncclGroupStart/End`` on NCCL) needs to post a
    whole exchange step at once. ``peer`` maps a group rank to the global rank (default:
    identity). Pure: no process group needed, so the NCCL path's op list is tested on any machine.
    """
    to_global = peer if peer is not None else (lambda r: r)
    ops = [("recv", buf, to_global(src), tag) for buf, (_, _, src, tag, _, _) in
           zip(bufs, rs.recvs)]
    ops += [("send", flat[a:b], to_global(dst), tag) for a, b, dst, tag in rs.sends]
    return ops


def run_schedule(schedule: Schedule, tensor: torch.Tensor, op: str = "sum", group: Any = None,
                 *, timeline: Any = None, timeout: float | None = None,
                 batched: bool | None = None, check: bool = True) -> torch.Tensor:
    """Execute ``schedule`` on this rank's ``tensor`` in place and return it.

    Every rank of ``group`` must call it with the same schedule and op. ``timeline`` (a
    :class:`distlab.timeline.Timeline`) gets one span per step on lane ``"rank<r>/allreduce"``
    (on CUDA each step is synchronized first so its span is true device time).
    ``timeout`` (seconds) bounds every wait; ``None`` uses the process group's timeout.
    ``batched`` posts each step as one ``batch_isend_irecv`` (what NCCL needs: one
    ``ncclGroupStart/End`` per step so exchanges cannot deadlock); ``None`` means "for CUDA
    tensors". gloo accepts it too, which is how the NCCL code path is tested without a GPU.
    ``check`` (default on) first gathers a 48-byte fingerprint of (algorithm, options, world
    size, count, dtype, op) from every rank (:mod:`.peercheck`) and raises
    :class:`~distlab.collectives.peercheck.CollectiveMismatchError` naming the ranks and what
    differs, instead of hanging until the timeout; ``check=False`` skips that one small gather.
    """
    op = check_op(op)
    check = check_bool("check", check)
    if not isinstance(schedule, Schedule):
        raise TypeError(f"schedule must be a Schedule, got {type(schedule).__name__}")
    _check_tensor_alone(tensor, op)
    rank, world, backend = _group_info(group)
    _check_tensor(tensor, backend)
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
    gr = _peer(group, rank)
    if check:
        desc = describe(schedule.algorithm, schedule.options, world, schedule.count,
                        tensor.dtype, op)
        try:
            check_peers(desc, group, tensor.device, wait_td)
        except CollectiveMismatchError:
            raise
        except Exception as exc:
            raise RuntimeError(f"all_reduce ({schedule.algorithm}) failed on rank {gr} at the "
                               f"peer check before step 0; a peer may have died or timed out: "
                               f"{exc}") from exc
    flat = tensor.view(-1)
    reduce = _reducer(op)
    nccl = flat.is_cuda
    use_batch = nccl if batched is None else bool(batched)
    plan = rank_plan(schedule, rank)
    scratch = _workspace(plan.scratch, flat.dtype, flat.device) if plan.scratch else flat
    if timeline is not None:
        from distlab.timeline import now_us
    peer = (lambda r: r) if group is None else (lambda r: dist.get_global_rank(group, r))
    for rs in plan.steps:
        t0 = now_us() if timeline is not None else 0.0
        bufs = [flat[a:b] if off is None else scratch[off:off + b - a]
                for a, b, _, _, _, off in rs.recvs]
        try:  # posting can fail too: a peer that already left closed the connection
            if use_batch:
                p2p = [dist.P2POp(dist.irecv if kind == "recv" else dist.isend, buf, gpeer,
                                  group, tag)
                       for kind, buf, gpeer, tag in step_p2p_ops(rs, flat, bufs, peer)]
                works = dist.batch_isend_irecv(p2p)
                recv_works, send_works = works[:len(bufs)], works[len(bufs):]
                if len(works) != len(p2p):  # coalesced into one work: wait it for everything
                    recv_works, send_works = [works[-1]] * len(bufs), works
            else:
                recv_works = [dist.irecv(buf, peer(src), group=group, tag=tag)
                              for buf, (_, _, src, tag, _, _) in zip(bufs, rs.recvs)]
                send_works = [dist.isend(flat[a:b], peer(dst), group=group, tag=tag)
                              for a, b, dst, tag in rs.sends]
            sends_done = False
            for i, (buf, work) in enumerate(zip(bufs, recv_works)):
                a, b, _, _, kind, off = rs.recvs[i]
                _wait(work, wait_td)
                if i >= rs.sends_first_needed and not sends_done:
                    for w in send_works:  # our own send still reads these elements
                        _wait(w, wait_td)
                    sends_done = True
                if kind == "reduce":
                    reduce(flat[a:b], buf)
                elif off is not None:
                    flat[a:b].copy_(buf)
            if not sends_done:
                for work in send_works:
                    _wait(work, wait_td)
        except Exception as exc:
            raise RuntimeError(f"all_reduce ({schedule.algorithm}) failed on rank {gr} at step "
                               f"{rs.index} ({rs.label}); a peer may have died or timed out: "
                               f"{exc}") from exc
        if timeline is not None:
            if nccl:
                torch.cuda.synchronize(flat.device)
            t1 = now_us()
            size = flat.element_size()
            timeline.record(f"step {rs.index}", "allreduce", f"rank{gr}/allreduce", t0, t1 - t0, {
                "algorithm": schedule.algorithm, "label": rs.label,
                "sent_bytes": sum(b - a for a, b, _, _ in rs.sends) * size,
                "recv_bytes": sum(r[1] - r[0] for r in rs.recvs) * size,
                "messages": max(len(rs.sends), len(rs.recvs))})
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
               batched: bool | None = None, check: bool = True,
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
        batched: post each step as one ``batch_isend_irecv`` (default: only for CUDA/NCCL).
        check: first verify (one 48-byte all_gather) that every rank called with the same
            algorithm, options, count, dtype and op; a mismatch raises ``CollectiveMismatchError``
            on every rank, naming the ranks and what differs, instead of hanging.
        **options: algorithm options (``segment_size`` for segmented_ring, ``group_size`` for
            hierarchical).

    Raises:
        TypeError / ValueError: bad arguments (unknown algorithm, non-contiguous tensor, wrong
            device for the backend, avg on integers, group_size not dividing the world size...).
        RuntimeError: not initialized, or a peer failed or timed out during a step.
        CollectiveMismatchError (a RuntimeError): ranks disagree on the call (``check=True``).
    """
    op = check_op(op)
    algorithm = check_algorithm(algorithm)
    _check_tensor_alone(tensor, op)
    rank, world, backend = _group_info(group)
    _check_tensor(tensor, backend)
    try:
        key = tuple(sorted(options.items()))
        hash(key)
    except TypeError:
        schedule = build(algorithm, world, tensor.numel(), **options)
    else:
        schedule = _cached_build(algorithm, world, tensor.numel(), key)
    return run_schedule(schedule, tensor, op, group, timeline=timeline, timeout=timeout,
                        batched=batched, check=check)
