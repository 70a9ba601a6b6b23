"""One rank's part of one pipeline step: its actions of a plan, run in order.

:func:`run_step` walks ``plan.rank_actions(rank)`` (:meth:`PipelinePlan.rank_actions`: the
compute actions with the sends and receives they imply). Around each compute action:

1. its receives are posted (if not yet), and so are those of the *next* compute action where
   their buffers can be made already, so a message can land while this action computes;
2. it waits for its own receives (a first-step activation: the metadata header first, checked
   against the stage's ``input_args``, then the tensors);
3. it computes (``F``, ``B``, ``I`` or ``W`` on its stage); a stage whose neighbour sits on this
   rank too hands its tensors over in memory (V-shaped schedules);
4. its sends are posted and not waited for; sends already done are dropped after each action,
   the rest are waited for at the end of the step.

Every wait is bounded (:class:`~distlab.pipeline_parallel.runtime.p2p.Channel`). With a
timeline, compute actions are spans on lane ``"rank{r}/compute"`` (named ``"2F0"``, category
``forward``/``backward``/``backward_input``/``backward_weight``, args ``stage``, ``microbatch``,
``kind``, as :meth:`~distlab.pipeline_parallel.simulate.Simulation.to_timeline` draws a
simulated step); on ``"rank{r}/p2p"`` every receive is the span of its wait (named as the action,
``"1RECV_F0"``, category ``p2p_wait``), every send the span of its posting (``"0SEND_F0"``,
category ``p2p_send``) and, where it had not finished by the end of the step, of its wait
(``"wait 0SEND_F0"``, ``p2p_wait``), all with args ``action``, ``peer``, ``nbytes``; the whole
step is one span on ``"rank{r}/step"``. ``r`` is the global rank.

Under torch.profiler each compute action is also a ``record_function`` span named as torch's
pipelining runtime names it, ``"PP:2F0"`` (the compute only: receive waits and sends are outside
it), which :mod:`distlab.judge.pipeline_bubble` reads back from the trace.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.profiler import record_function

from distlab.pipeline_parallel.actions import Action, Kind
from distlab.pipeline_parallel.plan import PipelinePlan
from distlab.pipeline_parallel.runtime.measure import ActivationMeter, StepStats
from distlab.pipeline_parallel.runtime.p2p import (
    HEADER_LEN,
    Channel,
    TensorMeta,
    decode_meta,
    encode_meta,
    message_tag,
)
from distlab.pipeline_parallel.runtime.stage import PipelineStage
from distlab.pipeline_parallel.simulate import KIND_CATEGORY
from distlab.timeline import Timeline, now_us

__all__ = ["StepInputs", "forward_only", "run_step"]

_FORWARD_KINDS = (Kind.FORWARD, Kind.SEND_F, Kind.RECV_F)


@dataclass
class StepInputs:
    """What one step runs on: per microbatch the first stage's args and every stage's kwargs,
    the last stage's targets, the loss and how its gradient is scaled."""

    args: list[tuple[Any, ...]]
    kwargs: list[dict[str, Any]]
    targets: list[Any] | None
    loss_fn: Callable[..., torch.Tensor] | None
    loss_kwargs: dict[str, Any] | None
    scale: float
    keep_outputs: bool
    has_backward: bool


@dataclass
class _Recv:
    action: Action
    peer: int
    buffers: list[torch.Tensor] = field(default_factory=list)
    works: list[Any] = field(default_factory=list)
    header: torch.Tensor | None = None


def forward_only(actions: tuple[Action, ...]) -> tuple[Action, ...]:
    """The forwards of ``actions`` and their sends and receives (an eval step)."""
    return tuple(a for a in actions if a.kind in _FORWARD_KINDS)


class _StepRunner:
    def __init__(self, plan: PipelinePlan, rank: int, stages: dict[int, PipelineStage],
                 channel: Channel, step: StepInputs, timeline: Timeline | None,
                 meter: ActivationMeter | None) -> None:
        self.plan, self.rank, self.stages, self.channel = plan, rank, stages, channel
        self.step, self.timeline, self.meter = step, timeline, meter
        self.grank = channel.rank
        self.recvs: dict[Action, _Recv] = {}
        self.sends: list[tuple[Action, list[Any], list[torch.Tensor]]] = []
        self.compute_s = 0.0
        self.wait_s = 0.0
        self.computes = 0

    # ---- receives --------------------------------------------------------------------------
    def _peer(self, a: Action) -> int:
        return self.plan.rank_of(a.stage - 1 if a.kind is Kind.RECV_F else a.stage + 1)

    def _post_recv(self, a: Action, *, only_if_ready: bool = False) -> None:
        if a in self.recvs:
            return
        stage = self.stages[a.stage]
        r = _Recv(a, self._peer(a))
        n = self.plan.num_stages
        if a.kind is Kind.RECV_F:
            metas = stage.recv_metas.get(stage.key(a.microbatch))
            if metas is None:
                r.header = torch.empty(HEADER_LEN, dtype=torch.int64)
                r.works = [self.channel.irecv(r.header, r.peer, message_tag(
                    "header", a.stage - 1, a.microbatch, 0, n))]
            else:
                self._post_buffers(r, metas, "activation", a.stage - 1)
        else:
            metas = stage.output_metas(a.microbatch)
            if metas is None:
                if only_if_ready:
                    return
                raise RuntimeError(f"stage {a.stage}: {a} before the forward of microbatch "
                                   f"{a.microbatch}")
            self._post_buffers(r, tuple(m for m in metas if m.is_floating), "gradient",
                               a.stage)
        self.recvs[a] = r

    def _post_buffers(self, r: _Recv, metas: tuple[TensorMeta, ...], channel: str,
                      boundary: int) -> None:
        device = self.stages[r.action.stage].device
        r.buffers = [torch.empty(m.shape, dtype=m.dtype, device=device) for m in metas]
        r.works = [self.channel.irecv(b, r.peer, message_tag(
            channel, boundary, r.action.microbatch, i, self.plan.num_stages))
            for i, b in enumerate(r.buffers)]

    def _finish_recv(self, a: Action) -> None:
        self._post_recv(a)
        r = self.recvs.pop(a)
        stage = self.stages[a.stage]
        t0 = now_us()
        what = f"{a} from pipeline rank {r.peer}"
        if r.header is not None:
            self.channel.wait(r.works, what + " (shapes)")
            metas = decode_meta(r.header)
            stage.check_received(a.microbatch, metas)
            stage.recv_metas[stage.key(a.microbatch)] = metas
            self._post_buffers(r, metas, "activation", a.stage - 1)
        self.channel.wait(r.works, what)
        self._wait_span(a, r.peer, t0, sum(b.nbytes for b in r.buffers))
        if a.kind is Kind.RECV_F:
            stage.set_inputs(a.microbatch, tuple(r.buffers))
        else:
            stage.set_output_grads(a.microbatch, tuple(r.buffers))

    # ---- sends -----------------------------------------------------------------------------
    def _send(self, a: Action) -> None:
        t0 = now_us()
        stage = self.stages[a.stage]
        n = self.plan.num_stages
        if a.kind is Kind.SEND_F:
            peer = self.plan.rank_of(a.stage + 1)
            tensors = [t.detach().contiguous() for t in stage.take_outputs(a.microbatch)]
            works, keep = [], list(tensors)
            if stage.key(a.microbatch) not in stage.sent_headers:
                header = encode_meta(tuple(TensorMeta(tuple(t.shape), t.dtype)
                                           for t in tensors))
                keep.append(header)
                works.append(self.channel.isend(header, peer, message_tag(
                    "header", a.stage, a.microbatch, 0, n)))
                stage.sent_headers.add(stage.key(a.microbatch))
            works += [self.channel.isend(t, peer, message_tag(
                "activation", a.stage, a.microbatch, i, n)) for i, t in enumerate(tensors)]
        else:
            peer = self.plan.rank_of(a.stage - 1)
            keep = [g.detach().contiguous() for g in stage.take_input_grads(a.microbatch)]
            works = [self.channel.isend(g, peer, message_tag(
                "gradient", a.stage - 1, a.microbatch, i, n)) for i, g in enumerate(keep)]
        self.sends.append((a, works, keep))
        if self.timeline is not None:
            self._p2p_span(str(a), "p2p_send", a, peer, t0, sum(t.nbytes for t in keep))

    def _reap_sends(self) -> None:
        self.sends = [s for s in self.sends if not all(w.is_completed() for w in s[1])]

    def _wait_sends(self) -> None:
        for a, works, keep in self.sends:
            t0 = now_us()
            peer = self.plan.rank_of(a.stage + 1 if a.kind is Kind.SEND_F else a.stage - 1)
            self.channel.wait(works, f"{a} to pipeline rank {peer}")
            self._wait_span(a, peer, t0, sum(t.nbytes for t in keep), f"wait {a}")
        self.sends = []

    # ---- compute ---------------------------------------------------------------------------
    def _compute(self, a: Action, last_grad: set[Action]) -> None:
        step, stage, m = self.step, self.stages[a.stage], a.microbatch
        if a.kind is Kind.FORWARD:
            target = None
            if stage.is_last and step.targets is not None:
                target = step.targets[m]
            stage.forward(m, step.args[m] if stage.is_first else (), step.kwargs[m],
                          self.meter, step.loss_fn, target, step.loss_kwargs,
                          step.keep_outputs)
            nxt = self.stages.get(a.stage + 1)
            if nxt is not None:  # the next stage is here too: hand over in memory
                outs = stage.take_outputs(m)
                metas = tuple(TensorMeta(tuple(t.shape), t.dtype) for t in outs)
                nxt.check_received(m, metas)
                nxt.set_inputs(m, outs)
        elif a.kind is Kind.FULL_BACKWARD:
            stage.backward(m, step.scale, a in last_grad, self.meter)
        elif a.kind is Kind.BACKWARD_INPUT:
            stage.backward_input(m, step.scale)
        elif a.kind is Kind.BACKWARD_WEIGHT:
            stage.backward_weight(m, a in last_grad, self.meter)
        if a.kind in (Kind.FULL_BACKWARD, Kind.BACKWARD_INPUT):
            prev = self.stages.get(a.stage - 1)
            if prev is not None:
                prev.set_output_grads(m, stage.take_input_grads(m))

    def _wait_span(self, a: Action, peer: int, t0: float, nbytes: int,
                   name: str | None = None) -> None:
        self.wait_s += (now_us() - t0) / 1e6
        if self.timeline is not None:
            self._p2p_span(name or str(a), "p2p_wait", a, peer, t0, nbytes)

    def _p2p_span(self, name: str, category: str, a: Action, peer: int, t0: float,
                  nbytes: int) -> None:
        assert self.timeline is not None
        self.timeline.record(name, category, f"rank{self.grank}/p2p", t0, now_us() - t0,
                             {"action": str(a), "peer": peer, "nbytes": int(nbytes)})

    def run(self, actions: tuple[Action, ...]) -> None:
        groups: list[tuple[list[Action], Action, list[Action]]] = []
        recvs: list[Action] = []
        for a in actions:
            if a.kind in (Kind.RECV_F, Kind.RECV_B):
                recvs.append(a)
            elif a.kind in (Kind.SEND_F, Kind.SEND_B):
                groups[-1][2].append(a)
            else:
                groups.append((recvs, a, []))
                recvs = []
        last_grad = _last_gradient_actions(actions)
        for k, (needs, a, sends) in enumerate(groups):
            for r in needs:
                self._post_recv(r)
            if k + 1 < len(groups):
                for r in groups[k + 1][0]:
                    self._post_recv(r, only_if_ready=True)
            for r in needs:
                self._finish_recv(r)
            t0 = now_us()
            with record_function(f"PP:{a}"):  # torch's profiler name of an action
                self._compute(a, last_grad)
            t1 = now_us()
            self.compute_s += (t1 - t0) / 1e6
            self.computes += 1
            if self.timeline is not None:
                self.timeline.record(str(a), KIND_CATEGORY[a.kind], f"rank{self.grank}/compute",
                                     t0, t1 - t0, {"stage": a.stage, "microbatch": a.microbatch,
                                                   "kind": a.kind.value})
            for s in sends:
                self._send(s)
            self._reap_sends()
            if self.meter is not None:
                self.meter.sample()
        self._wait_sends()


def _last_gradient_actions(actions: tuple[Action, ...]) -> set[Action]:
    """Per stage, its last action that accumulates parameter gradients (``B`` or ``W``)."""
    last: dict[int, Action] = {}
    for a in actions:
        if a.kind in (Kind.FULL_BACKWARD, Kind.BACKWARD_WEIGHT):
            last[a.stage] = a
    return set(last.values())


def run_step(plan: PipelinePlan, rank: int, stages: dict[int, PipelineStage],
             channel: Channel, step: StepInputs, timeline: Timeline | None) -> StepStats:
    """Run pipeline rank ``rank``'s actions of ``plan`` on ``stages`` (stage index -> stage,
    the stages it holds) for one step; this rank's :class:`StepStats`. With a ``timeline`` the
    step is traced whole: every action a span, and the activation bytes counted from live
    tensors (:class:`ActivationMeter`, which costs a few percent of a small step); without one
    it runs as torch's does and its stats hold no activation figures."""
    params = [p for s in stages.values() for p in s.parameters()]
    meter = ActivationMeter(exclude=params) if timeline is not None else None
    runner = _StepRunner(plan, rank, stages, channel, step, timeline, meter)
    actions = plan.rank_actions(rank)
    if not step.has_backward:
        actions = forward_only(actions)
    t0 = now_us()
    start = time.perf_counter()
    try:
        runner.run(actions)
    finally:
        seconds = time.perf_counter() - start
        if timeline is not None:
            timeline.record(f"step {plan.schedule}", "step", f"rank{channel.rank}/step", t0,
                            now_us() - t0, {"schedule": plan.schedule,
                                            "microbatches": plan.microbatches})
    return StepStats(plan.schedule, rank, tuple(sorted(stages)), plan.microbatches, seconds,
                     runner.compute_s, runner.wait_s,
                     meter.peak_nbytes if meter is not None else None,
                     meter.peak_in_flight if meter is not None else None,
                     meter.saved_nbytes if meter is not None else {}, runner.computes)
