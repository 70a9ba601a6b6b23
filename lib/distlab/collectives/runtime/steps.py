"""One rank's steps of a schedule on real ranks: posting, waiting, packing, reducing.

:class:`StepRunner` executes a :class:`~distlab.collectives.runtime.rank_plan.RankPlan` on this
rank's flat tensor. On gloo (:meth:`StepRunner.run_posted_ahead`) the receives of the next step are
posted while the current one is in flight and every receive of a step before any of its sends; each
received message is applied as it lands (reduced into the tensor or copied), after this rank's own
sends of the same elements (read from the tensor) have completed. On NCCL
(:meth:`StepRunner.run_batched`) each step is one ``batch_isend_irecv``. Messages of several ranges
are packed into a staging area and unpacked as they land; elements that a read-only source still
holds are read from it (see :mod:`distlab.collectives.runtime.rank_plan`).
"""

from __future__ import annotations

import datetime
import functools
import threading
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from distlab.collectives.plan.schedule import Schedule
from distlab.collectives.runtime.group import global_rank, wait
from distlab.collectives.runtime.peercheck import CollectiveMismatchError, InlineCheck
from distlab.collectives.runtime.rank_plan import Message, RankStep, rank_plan
from distlab.timeline import Timeline, now_us

__all__ = ["StepRunner", "reducer_out", "step_p2p_ops", "workspace", "workspaces"]

_WORKSPACE: dict[tuple[int, str, torch.dtype, torch.device], torch.Tensor] = {}
_WORKSPACE_LOCK = threading.Lock()


def workspace(numel: int, dtype: torch.dtype, device: torch.device,
              purpose: str = "scratch") -> torch.Tensor:
    """A reusable flat buffer of at least ``numel`` elements (grown, never shrunk), one per
    ``purpose`` (``"scratch"``: the executor's; ``"buffer"``: a collective's working buffer) and
    per thread, so collectives running at once on two threads (two ZeRO-3 models' communication
    threads) never share one; the buffers of threads that have ended are dropped."""
    key = (threading.get_ident(), purpose, dtype, device)
    buf = _WORKSPACE.get(key)
    if buf is None or buf.numel() < numel:
        buf = torch.empty(max(numel, 1), dtype=dtype, device=device)
        with _WORKSPACE_LOCK:
            alive = {t.ident for t in threading.enumerate()}
            for k in [k for k in _WORKSPACE if k[0] not in alive]:
                del _WORKSPACE[k]
            _WORKSPACE[key] = buf
    return buf


def workspaces() -> list[torch.Tensor]:
    """The workspaces this process holds now, every thread's (communication buffers, not model
    state)."""
    with _WORKSPACE_LOCK:
        return list(_WORKSPACE.values())


def step_p2p_ops(rs: RankStep, sends: list[torch.Tensor], recvs: list[torch.Tensor],
                 peer: Any = None, tag_base: int = 0) -> list[tuple[str, torch.Tensor, int, int]]:
    """The point-to-point operations of one step, in the order they are posted as one batch.

    Returns ``(kind, tensor, peer, tag)`` with ``kind`` ``"recv"`` or ``"send"``: every receive
    of the step (into ``recvs``, one per ``rs.recvs``) before every send (``sends``, one per
    ``rs.sends``), which is what one ``batch_isend_irecv`` (one ``ncclGroupStart/End`` on NCCL)
    needs to post a whole exchange step at once. ``peer`` maps a group rank to the global rank
    (default: identity); tags are ``tag_base | the plan's tag``. Pure: no process group needed,
    so the NCCL path's op list is tested on any machine.
    """
    to_global = peer if peer is not None else (lambda r: r)
    ops = [("recv", buf, to_global(m.peer), tag_base | m.tag)
           for buf, m in zip(recvs, rs.recvs, strict=True)]
    ops += [("send", buf, to_global(m.peer), tag_base | m.tag)
            for buf, m in zip(sends, rs.sends, strict=True)]
    return ops


class StepRunner:
    """Everything the steps of one executor call need (built once per call).

    Args:
        schedule: the plan; ``flat``: this rank's flat buffer (written in place).
        reduce: ``reduce(out, x)`` in place; ``reduce_out(out, a, b)``: ``out = op(a, b)``.
        group, rank: the process group and this rank's group rank.
        timeout: bound on every wait (``None``: the group's).
        base: the call's tag base (:mod:`distlab.collectives.runtime.tags`).
        source: ``(tensor, (start, stop))``: a read-only tensor holding the buffer's elements
            ``[start, stop)`` until this rank writes them, or ``None``.
        timeline: one span per step when given.
    """

    def __init__(self, schedule: Schedule, flat: torch.Tensor, reduce: Any, reduce_out: Any,
                 group: Any, rank: int, timeout: datetime.timedelta | None, base: int,
                 source: tuple[torch.Tensor, tuple[int, int]] | None = None,
                 timeline: Timeline | None = None) -> None:
        self.schedule, self.flat, self.group, self.timeout = schedule, flat, group, timeout
        self.reduce, self.reduce_out, self.base, self.timeline = reduce, reduce_out, base, timeline
        self.grank = global_rank(group, rank)
        self.peer = functools.partial(global_rank, group)
        self.source, self.source_at = (None, 0) if source is None else (source[0],
                                                                         source[1][0])
        self.plan = rank_plan(schedule, rank, None if source is None else tuple(source[1]))
        self.scratch = (workspace(self.plan.scratch, flat.dtype, flat.device)
                        if self.plan.scratch else flat)

    def failed(self, where: str, exc: Exception) -> RuntimeError:
        """The error raised when a step fails (a peer died, timed out or closed the link)."""
        return RuntimeError(f"{self.schedule.collective} ({self.schedule.algorithm}) failed on "
                            f"rank {self.grank} at {where}; a peer may have died or timed out: "
                            f"{exc}")

    def _read(self, a: int, b: int, from_source: bool) -> torch.Tensor:
        if from_source:
            return self.source[a - self.source_at:b - self.source_at]  # type: ignore[index]
        return self.flat[a:b]

    def fill(self, rs: RankStep) -> None:
        """Copy the step's ``fill`` ranges from the source into the tensor."""
        for a, b in rs.fill:
            self.flat[a:b].copy_(self._read(a, b, True))

    def send_buffers(self, rs: RankStep) -> list[torch.Tensor]:
        """Per send message, the tensor to send (packed into the staging area if needed)."""
        out = []
        for m in rs.sends:
            if m.offset is None:
                (a, b, _, src), = m.ranges
                out.append(self._read(a, b, src))
                continue
            stage = self.scratch[m.offset:m.offset + m.count]
            torch.cat([self._read(a, b, src) for a, b, _, src in m.ranges], out=stage)
            out.append(stage)
        return out

    def recv_buffers(self, rs: RankStep) -> list[torch.Tensor]:
        """Per receive message, where it lands (the tensor itself, or the workspace)."""
        return [self.flat[m.ranges[0][0]:m.ranges[0][1]] if m.offset is None
                else self.scratch[m.offset:m.offset + m.count] for m in rs.recvs]

    def post_recvs(self, rs: RankStep, deferred: bool | None = None,
                   posted: tuple[list[torch.Tensor], list[Any]] | None = None,
                   ) -> tuple[list[torch.Tensor], list[Any]]:
        """Post one step's receives; ``(buffers, works)``, one entry per receive.

        ``deferred``: ``None`` posts every receive; ``False`` only those posted ahead (their
        works for the deferred ones are ``None``); ``True`` the deferred ones, into ``posted``
        (the result of the ``False`` call), which is returned completed."""
        bufs, works = posted if posted is not None else (self.recv_buffers(rs),
                                                          [None] * len(rs.recvs))
        for i, (buf, m) in enumerate(zip(bufs, rs.recvs, strict=True)):
            if deferred is None or m.deferred == deferred:
                works[i] = dist.irecv(buf, self.peer(m.peer), group=self.group,
                                      tag=self.base | m.tag)
        return bufs, works

    def post_sends(self, rs: RankStep) -> list[Any]:
        """Fill, then post one step's sends; their works."""
        self.fill(rs)
        return [dist.isend(buf, self.peer(m.peer), group=self.group, tag=self.base | m.tag)
                for buf, m in zip(self.send_buffers(rs), rs.sends, strict=True)]

    def apply(self, m: Message, buf: torch.Tensor) -> None:
        """Apply one landed message: reduce or copy each of its ranges into the tensor."""
        if m.offset is None:
            return  # a copy received in place
        pos = 0
        for a, b, kind, from_source in m.ranges:
            piece = buf[pos:pos + b - a]
            pos += b - a
            if kind == "reduce":
                if from_source:
                    self.reduce_out(self.flat[a:b], self._read(a, b, True), piece)
                else:
                    self.reduce(self.flat[a:b], piece)
            else:
                self.flat[a:b].copy_(piece)

    def complete(self, rs: RankStep, bufs: list[torch.Tensor], recv_works: list[Any],
                 send_works: list[Any]) -> None:
        """Wait for each receive and apply it as it lands (own tensor-reading sends first)."""
        sends_done = False
        for i, (m, buf, work) in enumerate(zip(rs.recvs, bufs, recv_works, strict=True)):
            wait(work, self.timeout)
            if i >= rs.sends_first_needed and not sends_done:
                for w in send_works:  # our own send still reads these elements
                    wait(w, self.timeout)
                sends_done = True
            self.apply(m, buf)
        if not sends_done:
            for work in send_works:
                wait(work, self.timeout)

    def record(self, rs: RankStep, t0: float) -> None:
        """One span per step on lane ``rank<r>/<collective>`` (CUDA: synchronized first)."""
        if self.timeline is None:
            return
        if self.flat.is_cuda:
            torch.cuda.synchronize(self.flat.device)
        size = self.flat.element_size()
        name = self.schedule.collective.replace("_", "")
        self.timeline.record(f"step {rs.index}", name, f"rank{self.grank}/{name}", t0,
                             now_us() - t0, {
                                 "algorithm": self.schedule.algorithm, "label": rs.label,
                                 "sent_bytes": sum(m.count for m in rs.sends) * size,
                                 "recv_bytes": sum(m.count for m in rs.recvs) * size,
                                 "messages": max(len(rs.sends), len(rs.recvs))})

    def run_posted_ahead(self, inline: InlineCheck | None) -> None:
        """Step by step, the receives of the next step posted before waiting on this one's
        (a ``deferred`` one once this step's sends have finished); the inline peer check (if
        any) verified before the first wait for data."""
        steps = self.plan.steps
        recv: tuple[list[torch.Tensor], list[Any]] = ([], [])
        try:
            if steps:
                recv = self.post_recvs(steps[0])
        except Exception as exc:
            raise self.failed(f"step {steps[0].index} ({steps[0].label})", exc) from exc
        for i, rs in enumerate(steps):
            t0 = now_us() if self.timeline is not None else 0.0
            nxt_step = steps[i + 1] if i + 1 < len(steps) else None
            try:  # posting can fail too: a peer that already left closed the connection
                sends = self.post_sends(rs)
                nxt = self.post_recvs(nxt_step, False) if nxt_step else ([], [])
            except Exception as exc:
                raise self.failed(f"step {rs.index} ({rs.label})", exc) from exc
            if inline is not None:
                self.verify(inline)
            try:
                self.complete(rs, recv[0], recv[1], sends)
            except Exception as exc:
                raise self.failed(f"step {rs.index} ({rs.label})", exc) from exc
            if nxt_step is not None and any(m.deferred for m in nxt_step.recvs):
                try:  # this step's sends have finished: nothing reads those elements now
                    nxt = self.post_recvs(nxt_step, True, nxt)
                except Exception as exc:
                    raise self.failed(f"step {nxt_step.index} ({nxt_step.label})", exc) from exc
            self.record(rs, t0)
            recv = nxt

    def run_batched(self) -> None:
        """Step by step, each step one ``batch_isend_irecv`` (what NCCL needs)."""
        for rs in self.plan.steps:
            t0 = now_us() if self.timeline is not None else 0.0
            try:
                self.fill(rs)
                bufs = self.recv_buffers(rs)
                p2p = [dist.P2POp(dist.irecv if kind == "recv" else dist.isend, buf, gpeer,
                                  self.group, tag)
                       for kind, buf, gpeer, tag in step_p2p_ops(rs, self.send_buffers(rs), bufs,
                                                                 self.peer, self.base)]
                works = dist.batch_isend_irecv(p2p) if p2p else []
                if len(works) != len(p2p):  # coalesced into one work: wait it for everything
                    recv_works, send_works = [works[-1]] * len(bufs), works
                else:
                    recv_works, send_works = works[:len(bufs)], works[len(bufs):]
                self.complete(rs, bufs, recv_works, send_works)
            except Exception as exc:
                raise self.failed(f"step {rs.index} ({rs.label})", exc) from exc
            self.record(rs, t0)

    def verify(self, inline: InlineCheck) -> None:
        """The inline peer check's verdict (a dead peer is reported as a failed step 0)."""
        try:
            inline.verify()
        except CollectiveMismatchError:
            raise
        except Exception as exc:
            raise self.failed("the peer check before step 0", exc) from exc


def reducer_out(op: str) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], Any]:
    """``reduce_out(out, a, b)``: ``out = op(a, b)`` (``avg`` sums; divide after)."""
    fn = {"sum": torch.add, "avg": torch.add, "prod": torch.mul, "max": torch.maximum,
          "min": torch.minimum}[op]
    return lambda out, a, b: fn(a, b, out=out)
