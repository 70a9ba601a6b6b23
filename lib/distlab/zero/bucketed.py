"""ZeRO stages 0-2 on live ranks: parameters in flat buckets, each reduced once it is complete.

The engine behind ``ZeroDataParallel(stage=0, 1 or 2)`` (:mod:`distlab.zero.optimizer` says what
each stage holds and moves, and how a joined rank shadows the others); stage 3 is
:class:`distlab.zero.stage3.Stage3`. ``ZeroDataParallel`` calls both through
:class:`distlab.zero.engine.ZeroEngine`; this one is also a
:class:`~distlab.zero.engine.BucketEngine` (its buckets, and Join).

Gradient accumulation: with ``sync`` off (``ZeroDataParallel.no_sync()``) a backward reduces
nothing: autograd sums into ``.grad`` (the full gradient buffers at stages 0-1, plain ``.grad``
tensors at stage 2); the next backward with ``sync`` on reduces each bucket as it completes, or
:meth:`Bucketed.finish_gradient_sync` reduces every bucket now.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from distlab.collectives.runtime.by_name import all_gather_into, all_reduce_sum, reduce_scatter_sum
from distlab.timeline import Timeline, now_us
from distlab.uneven import run_bounded
from distlab.zero.partition import Bucket, plan_buckets

__all__ = ["Bucketed"]

_MB = 1024 * 1024


class Bucketed:
    """Stages 0, 1, 2 of ``ZeroDataParallel`` on this rank.

    Args:
        params: the trainable parameters (they become views of flat bucket buffers).
        stage: 0, 1 or 2.
        rank, world: this rank and the group's size.
        group: the process group of the parameter broadcast at start.
        comm: the (bounded) process group the collectives run on.
        dtype: parameter and gradient dtype of the buffers (16-bit: fp32 masters).
        cap_mb: MiB per bucket.
        algorithm: the collectives' algorithm (``None``, a distlab plan name, ``"builtin"``).
        make_optimizer: ``params -> torch.optim.Optimizer`` over the masters (one per bucket).
        timeline_of: returns the timeline to record on now (or None).
        timeout: seconds a collective may take.
    """

    def __init__(self, params: list[torch.nn.Parameter], *, stage: int, rank: int, world: int,
                 group: Any, comm: Any, dtype: torch.dtype, cap_mb: float,
                 algorithm: str | None,
                 make_optimizer: Callable[[list[torch.Tensor]], torch.optim.Optimizer],
                 timeline_of: Callable[[], Timeline | None], timeout: float | None) -> None:
        self.params, self.stage, self.rank, self.world = params, stage, rank, world
        self.group, self._comm, self.dtype, self.algorithm = group, comm, dtype, algorithm
        self.timeout, self._timeline_of = timeout, timeline_of
        item = torch.empty((), dtype=self.dtype).element_size()
        self.buckets = plan_buckets([p.numel() for p in self.params], item,
                                    max(1, int(cap_mb * _MB)), self.world)
        self.flats, self.masters = [], []
        for k, b in enumerate(self.buckets):
            flat, own = self._flatten(b)
            self.flats.append(flat)
            self.masters.append(self._master(k, own))
        self.optimizer = make_optimizer(list(self.masters))
        self._grad_flats: list[torch.Tensor] = []
        self._grad_shards: list[torch.Tensor] = []
        self._pending: list[int] = []
        self.sync = True
        self._accumulated: set[int] = set()  # parameters given a gradient with sync off
        self._bucket_of = {i: k for k, b in enumerate(self.buckets) for i in b.indices}
        self._init_grads()
        for i, p in enumerate(self.params):
            p.register_post_accumulate_grad_hook(self._hook(i))
        self._backward_t0: float | None = None
        self._scale = 1.0 / self.world
        self._reduce_order: list[int] = []  # buckets in the order this backward reduced them
        self._last_order: list[int] = list(range(len(self.buckets)))

    # ---- layout ----------------------------------------------------------------------------

    def _flatten(self, b: Bucket) -> tuple[torch.Tensor, torch.Tensor]:
        """One bucket's flat buffer in ``param_dtype`` (its parameters become views of it) and
        the same values in the parameters' own dtype; rank 0's values win."""
        first = self.params[b.indices[0]]
        own = torch.zeros(b.padded, dtype=first.dtype, device=first.device)
        for i, off in zip(b.indices, b.offsets, strict=True):
            p = self.params[i]
            own[off:off + p.numel()].copy_(p.detach().reshape(-1))
        if self.world > 1:  # broadcast's src is a global rank: the group's rank 0
            src = dist.get_global_rank(self.group, 0) if self.group is not None else 0
            dist.broadcast(own, src, group=self.group)
        flat = own if own.dtype == self.dtype else own.to(self.dtype)
        for i, off in zip(b.indices, b.offsets, strict=True):
            p = self.params[i]
            p.data = flat[off:off + p.numel()].view_as(p)
        return flat, own

    def _shard(self, k: int, t: torch.Tensor) -> torch.Tensor:
        """This rank's shard of bucket ``k``'s buffer ``t`` (a view); the whole of it at stage 0."""
        if self.stage == 0:
            return t
        lo, hi = self.buckets[k].shard_range(self.rank)
        return t[lo:hi]

    def _master(self, k: int, own: torch.Tensor) -> torch.nn.Parameter:
        """What the optimizer steps for bucket ``k``: the shard itself (fp32), else an fp32
        copy of the shard of ``own`` (the initial weights before any 16-bit rounding)."""
        shard = self._shard(k, self.flats[k])
        if self.dtype == torch.float32:
            return torch.nn.Parameter(shard, requires_grad=False)  # shares the shard's storage
        return torch.nn.Parameter(self._shard(k, own).detach().float().clone(),
                                  requires_grad=False)

    def _init_grads(self) -> None:
        """Stages 0, 1: full gradient buffers the ``.grad`` s are views of; stage 2: shards."""
        for k, b in enumerate(self.buckets):
            dev = self.flats[k].device
            if self.stage <= 1:
                g = torch.zeros(b.padded, dtype=self.dtype, device=dev)
                self._grad_flats.append(g)
                for i, off in zip(b.indices, b.offsets, strict=True):
                    p = self.params[i]
                    p.grad = g[off:off + p.numel()].view_as(p)
            else:
                self._grad_shards.append(torch.zeros(b.shard, dtype=self.dtype, device=dev))
        self._pending = [len(b.indices) for b in self.buckets]

    # ---- backward --------------------------------------------------------------------------

    def after_forward(self, output: Any) -> None:
        """With a timeline: hook ``output`` (a tensor that requires grad) to mark where its
        backward starts."""
        if self.timeline is not None and isinstance(output, torch.Tensor) \
                and output.requires_grad:
            output.register_hook(self._mark_backward)

    def _mark_backward(self, grad: torch.Tensor) -> None:
        self._backward_t0 = now_us()

    def _lane(self, what: str) -> str:
        return f"rank{self.rank}/{what}"

    def _hook(self, i: int) -> Any:
        def hook(p: torch.Tensor) -> None:
            k = self._bucket_of[i]
            if self._pending[k] == 0:
                raise RuntimeError(f"a second backward before step() (bucket {k} was already "
                                   f"reduced): stage {self.stage} reduces a bucket once per "
                                   "step; to accumulate, run every backward but the last "
                                   "under no_sync() (or set_requires_gradient_sync(False))")
            if not self.sync:
                self._accumulated.add(i)
                return
            self._pending[k] -= 1
            if self._pending[k] == 0:
                self._reduce_bucket(k)
        return hook

    def _reduce_bucket(self, k: int) -> None:
        """Bucket ``k``'s gradients are complete: scale by 1/N and reduce them (stage 0: all,
        stage 1: in place into this rank's shard, stage 2: into the shard, freeing ``.grad``)."""
        b, t0 = self.buckets[k], now_us()
        if self.timeline is not None:
            self.timeline.record(f"bucket {k} ready", "ready", self._lane("backward"), t0, 0.0)
        if self.stage <= 1:
            full = self._grad_flats[k]
            full.mul_(self._scale)
        else:
            full = torch.zeros(b.padded, dtype=self.dtype, device=self.flats[k].device)
            for i, off in zip(b.indices, b.offsets, strict=True):
                p = self.params[i]
                torch.mul(p.grad.reshape(-1), self._scale, out=full[off:off + p.numel()])
                p.grad = None
        self._reduce_order.append(k)
        self._reduce_full(k, full)
        self._record("allreduce" if self.stage == 0 else "reduce_scatter", k, t0)

    def _reduce_full(self, k: int, full: torch.Tensor) -> None:
        """Sum bucket ``k``'s scaled gradient buffer ``full`` over the ranks: all of it (stage 0)
        or this rank's shard (in place at stage 1, into the gradient shard at stage 2)."""
        b = self.buckets[k]
        if self.world > 1 and b.padded:
            what = (f"{'allreduce' if self.stage == 0 else 'reduce-scatter'} of bucket {k} "
                    f"({len(b.indices)} parameters, {b.padded * full.element_size():,} bytes)")
            if self.stage == 0:
                run_bounded(self.rank, what, self.timeout, all_reduce_sum, full, self.algorithm,
                         self._comm)
            else:
                out = self._shard(k, full) if self.stage == 1 else self._grad_shards[k]
                run_bounded(self.rank, what, self.timeout, reduce_scatter_sum, out, full,
                         self.algorithm, self._comm)
        elif self.stage == 2:
            self._grad_shards[k].copy_(full)

    def _record(self, what: str, k: int, t0: float, *, shadow: bool = False) -> None:
        """A span for bucket ``k``'s ``what`` on lane ``rank{r}/{what}`` (category ``shadow``
        for a joined rank's zero-filled copy of it)."""
        if self.timeline is not None:
            b = self.buckets[k]
            nbytes = b.padded * self.flats[k].element_size()
            label = f"{'shadow ' if shadow else ''}{what} bucket {k}"
            self.timeline.record(label, "shadow" if shadow else what, self._lane(what), t0,
                                 now_us() - t0, {"bytes": nbytes})

    def finish_gradient_sync(self) -> None:
        """Reduce now every bucket whose gradients were all accumulated with ``sync`` off and
        not reduced yet (in reverse bucket order, the same on every rank); buckets a backward
        with ``sync`` on reduced, or missing a gradient, are left (:meth:`step` names the
        latter)."""
        for k in reversed(range(len(self.buckets))):
            if self._pending[k] and all(i in self._accumulated
                                        for i in self.buckets[k].indices):
                self._pending[k] = 0
                self._reduce_bucket(k)

    # ---- step ------------------------------------------------------------------------------

    def step(self) -> None:
        """The optimizer on this rank's shards, then all-gather the parameters (stages 1, 2); zeroes
        the full gradient buffers (stages 0, 1) for the next backward.

        Raises:
            RuntimeError: some bucket's gradients were not all produced since the last step.
        """
        if any(self._pending):
            raise RuntimeError(f"step() before every gradient was ready: buckets "
                               f"{[k for k, n in enumerate(self._pending) if n]} incomplete "
                               "(a parameter unused in forward, no backward since the last "
                               "step, or gradients accumulated with sync off that no backward "
                               "with sync on or finish_gradient_sync() reduced)")
        t0 = now_us()
        if self._backward_t0 is not None and self.timeline is not None:
            self.timeline.record("backward", "backward", self._lane("backward"),
                                 self._backward_t0, max(0.0, t0 - self._backward_t0))
            self._backward_t0 = None
        self._adam()
        if self.timeline is not None:
            self.timeline.record("Adam step", "step", self._lane("step"), t0, now_us() - t0)
        if self.stage >= 1 and self.world > 1:
            for k, b in enumerate(self.buckets):
                t1 = now_us()
                if b.padded:
                    run_bounded(self.rank, f"all-gather of bucket {k}", self.timeout,
                                all_gather_into, self.flats[k], self._shard(k, self.flats[k]),
                                self.algorithm, self._comm)
                self._record("all_gather", k, t1)
        for g in self._grad_flats:
            g.zero_()
        self._pending = [len(b.indices) for b in self.buckets]
        self._accumulated = set()
        if len(self._reduce_order) == len(self.buckets):
            self._last_order = self._reduce_order
        self._reduce_order = []

    def set_divide_factor(self, work: Any, divide_by_initial_world_size: bool) -> None:
        """Inside ``Join``, before a forward: scale this iteration's gradients by ``1/world``,
        or (``divide_by_initial_world_size=False``) by one over the ranks not yet joined, the
        sum of the "not joined" allreduce ``work`` (``None`` for all joinables but the
        first)."""
        active = self.world
        if work is not None and not divide_by_initial_world_size:
            work.wait()
            active = int(round(float(work.result()[0].item())))
        self._scale = 1.0 / active

    def shadow_iteration(self) -> None:
        """Joined rank: zeros into each bucket's collective (in the others' order), then the
        usual step on what comes back (the others' reduced gradient)."""
        for k in self._last_order:
            t0 = now_us()
            b = self.buckets[k]
            if self.stage <= 1:
                full = self._grad_flats[k]
                full.zero_()
            else:
                full = torch.zeros(b.padded, dtype=self.dtype, device=self.flats[k].device)
            self._reduce_full(k, full)
            self._record("allreduce" if self.stage == 0 else "reduce_scatter", k, t0,
                         shadow=True)
        self._reduce_order = list(self._last_order)
        self._pending = [0] * len(self.buckets)
        self.step()

    def _adam(self) -> None:
        """Give each master its reduced gradient (fp32), step, copy 16-bit shards back."""
        for k, m in enumerate(self.masters):
            g = (self._shard(k, self._grad_flats[k]) if self.stage <= 1
                 else self._grad_shards[k])
            m.grad = g if g.dtype == torch.float32 else g.float()
        self.optimizer.step()
        for k, m in enumerate(self.masters):
            if self.dtype != torch.float32:
                self._shard(k, self.flats[k]).copy_(m.detach())
            m.grad = None

    # ---- what this rank holds --------------------------------------------------------------

    def state_tensors(self) -> dict[str, list[torch.Tensor]]:
        """The tensors behind each model state on this rank: ``params`` (the flat parameter
        buffers), ``grads`` (full gradient buffers at stages 0-1, shards at stage 2, and any
        ``.grad`` still set), ``optimizer`` (Adam's state, and fp32 masters when they are
        copies). Storages may repeat; :func:`distlab.zero.measure.storage_bytes` dedupes."""
        grads = list(self._grad_flats) + list(self._grad_shards)
        grads += [p.grad for p in self.params if p.grad is not None]
        opt = [t for st in self.optimizer.state.values() for t in st.values()
               if isinstance(t, torch.Tensor)]
        if self.dtype != torch.float32:
            opt += list(self.masters)
        return {"params": list(self.flats), "grads": grads, "optimizer": opt}

    @property
    def timeline(self) -> Timeline | None:
        return self._timeline_of()

    def sharded_ids(self) -> set[int]:
        """Parameters held as shards only: none (stages 0-2 keep every parameter whole)."""
        return set()

    def full_parameters(self) -> dict[int, torch.Tensor]:
        """Nothing to gather: the parameters are whole on every rank."""
        return {}

    def load_parameters(self, values: dict[int, torch.Tensor]) -> None:
        """After ``values`` (``id(parameter) -> full value``) were copied into the parameters:
        16-bit buffers get their fp32 masters from the given values, not the rounded ones."""
        if self.dtype == torch.float32:
            return
        for k, b in enumerate(self.buckets):
            own = torch.zeros(b.padded, dtype=torch.float32, device=self.flats[k].device)
            for i, off in zip(b.indices, b.offsets, strict=True):
                p = self.params[i]
                own[off:off + p.numel()].copy_(values[id(p)].reshape(-1))
            self.masters[k].data.copy_(self._shard(k, own))

    def close(self) -> None:
        """Nothing runs in the background at stages 0-2."""
