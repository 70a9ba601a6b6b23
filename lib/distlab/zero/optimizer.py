"""ZeRO stages 0 to 3 on real ranks: data parallel training with Adam, the state sharded.

    zdp = ZeroDataParallel(model, stage=2, lr=1e-3)      # after init_process_group (gloo, nccl)
    for x in batches:
        zdp(x).pow(2).mean().backward()   # gradients reduced bucket by bucket during backward
        zdp.step()                        # Adam on this rank's shard, then all-gather

What each stage holds and moves per step (``P`` parameters, ``N`` ranks; see
:mod:`distlab.zero.memory_model` and :mod:`distlab.zero.comm_volume`):

- stage 0, plain data parallel: full gradient buffers, all-reduced per bucket as soon as a bucket
  is complete in backward; every rank runs Adam on all ``P`` parameters.
- stage 1: the same full gradient buffers (each ``.grad`` is a view into one), reduce-scattered
  per bucket in place: rank ``r`` gets the summed gradient of its shard in its own part of the
  buffer. Adam runs on the shard only (moments for ``P / N`` elements); the updated shards are
  all-gathered into the parameter buffers.
- stage 2: no full gradient buffer is kept: autograd fills ``.grad`` as usual, and when a
  bucket's gradients are all there they are copied into a transient bucket buffer,
  reduce-scattered into this rank's persistent ``P / N`` gradient shard, and the ``.grad`` s are
  freed. Then as stage 1.

Layout (:mod:`distlab.zero.partition`): each bucket is a flat parameter buffer that the
parameters are views of, padded to a multiple of ``N`` and cut into ``N`` equal shards. Adam
(``torch.optim.Adam``, elementwise, so sharding does not change its arithmetic) steps one
tensor per bucket: the shard itself when the parameters are fp32, or an fp32 master copy of it
when ``param_dtype`` is 16-bit (mixed precision: the shard is copied back, rounded, after the
step). Gradients are scaled by ``1/N`` before they are summed, as torch's DDP does, so fp32
results equal DDP + Adam bitwise wherever the sum order is the same (always on two ranks).

Collectives: distlab's own plans by default (:func:`distlab.collectives.reduce_scatter`,
:func:`~distlab.collectives.all_gather`, :func:`~distlab.collectives.all_reduce`, any of their
algorithms), or torch's built-ins with ``algorithm="builtin"``. With a ``timeline`` set, a step
records ``backward`` and ``bucket b ready`` on lane ``rank{r}/backward``, each collective on
``rank{r}/reduce_scatter`` (``rank{r}/allreduce`` for stage 0) and ``rank{r}/all_gather``, and
Adam on ``rank{r}/step``. Not supported: gradient accumulation over several backwards before a
step, parameters that get no gradient.

Stage 3 (parameters sharded too) runs per *unit* rather than per bucket, each unit gathered just
ahead of its forward and backward and freed after, with ``prefetch`` units gathered ahead:
:mod:`distlab.zero.stage3` says how. :meth:`ZeroDataParallel.full_state_dict` gives the full
parameters at every stage.

Uneven inputs (:mod:`distlab.uneven`): ``ZeroDataParallel`` is ``Joinable`` (stages 0-2). Inside
``torch.distributed.algorithms.Join([zdp])`` a rank out of batches shadows each iteration of the
others: zeros into every bucket's gradient collective, in the order the buckets were reduced
(its own last backward's order, else bucket order), then :meth:`ZeroDataParallel.step` as usual.
Joined ranks add zeros, so what a joined rank receives is exactly the others' reduced gradient:
its shard (stages 1, 2) or its copy (stage 0) and its Adam moments are updated as the others'
are, and the all-gathers are matched. After the loop the parameters are broadcast from a
last-joining rank, as torch's DDP does. ``divide_by_initial_world_size=False`` divides by the
ranks not yet joined. Collectives run on a process group of their own with a ``timeout``
(seconds, 30 by default): without Join a rank left alone in a collective raises
:class:`~distlab.uneven.UnevenInputsError` instead of waiting forever.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms.join import Join, Joinable, JoinHook

from distlab._checks import check_float, check_instance, check_int
from distlab.timeline import Timeline, now_us
from distlab.uneven import (
    DEFAULT_TIMEOUT_S,
    bounded_group,
    broadcast_from,
    check_timeout,
    last_joiner_rank,
    run_bounded,
)
from distlab.zero.calls import all_gather_into, all_reduce_sum, reduce_scatter_sum
from distlab.zero.memory_model import check_stage
from distlab.zero.partition import Bucket, plan_buckets
from distlab.zero.stage3 import Stage3

__all__ = ["ZeroDataParallel"]

_MB = 1024 * 1024


class ZeroJoinHook(JoinHook):
    """What a joined rank does per iteration of the others (see the module docstring).
    ``iterations``: iterations shadowed so far."""

    def __init__(self, zdp: ZeroDataParallel, divide_by_initial_world_size: bool = True) -> None:
        super().__init__()
        self.zdp = zdp
        zdp._divide_by_initial_world_size = bool(divide_by_initial_world_size)
        self.iterations = 0

    def main_hook(self) -> None:
        self.iterations += 1
        self.zdp._shadow_iteration()

    def post_hook(self, is_last_joiner: bool) -> None:
        zdp = self.zdp
        src = last_joiner_rank(zdp.rank, is_last_joiner, zdp._comm, zdp.join_device)
        broadcast_from(zdp.flats, src, zdp._comm)
        zdp.last_joiner = src


class ZeroDataParallel(Joinable):
    """Data-parallel training of ``module`` with Adam, ZeRO ``stage`` 0, 1 or 2.

    Args:
        module: the model; its trainable parameters become views into flat bucket buffers
            (cast to ``param_dtype``) and are broadcast from rank 0.
        stage: 0 (plain DDP), 1 (optimizer state sharded) or 2 (+ gradients sharded).
        lr, betas, eps, weight_decay: ``torch.optim.Adam``'s.
        param_dtype: dtype of parameters and gradients (default: the module's); a 16-bit dtype
            gives mixed precision with fp32 master weights and moments.
        bucket_cap_mb: MiB per bucket (of ``param_dtype`` elements).
        algorithm: ``None`` (distlab's default plans), a distlab algorithm name, or
            ``"builtin"`` (torch.distributed's collectives).
        group: the process group (``None``: the default group).
        timeline: a :class:`distlab.timeline.Timeline` to record steps on, or ``None``.
        timeout: seconds a collective may wait for its peers (``None``: the group's timeout).
        prefetch: stage 3: units whose all-gather is issued ahead of the one computing (0: none).
        units: stage 3: the submodules gathered as units (``None``: every module with
            trainable parameters of its own); see :mod:`distlab.zero.stage3`.

    Raises:
        ValueError: a bad stage, ``bucket_cap_mb <= 0``, ``prefetch < 0``, ``units`` with
            another stage or not submodules, or a module without trainable parameters.
    """

    def __init__(self, module: torch.nn.Module, stage: int, *, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, param_dtype: torch.dtype | None = None,
                 bucket_cap_mb: float = 25.0, algorithm: str | None = None,
                 group: Any = None, timeline: Timeline | None = None,
                 timeout: float | None = DEFAULT_TIMEOUT_S, prefetch: int = 1,
                 units: Sequence[torch.nn.Module] | None = None) -> None:
        super().__init__()
        check_instance("module", module, torch.nn.Module)
        self.timeout = check_timeout(timeout)
        self.stage = check_stage(stage)
        cap = check_float("bucket_cap_mb", bucket_cap_mb, minimum=0.0, exclusive_minimum=True)
        self.prefetch = check_int("prefetch", prefetch, minimum=0)
        if units is not None and self.stage != 3:
            raise ValueError(f"units= is for stage 3 (parameters gathered per unit); stage "
                             f"{self.stage} reduces buckets (bucket_cap_mb)")
        self.module, self.group, self.algorithm, self.timeline = module, group, algorithm, timeline
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        self.params = [p for p in module.parameters() if p.requires_grad]
        if not self.params:
            raise ValueError("module has no trainable parameters")
        self.dtype = param_dtype or self.params[0].dtype
        self._comm = bounded_group(group, self.timeout)
        self._stage3: Stage3 | None = None
        if self.stage == 3:
            self._stage3 = Stage3(module, rank=self.rank, world=self.world, group=group,
                                  comm=self._comm, dtype=self.dtype, algorithm=algorithm,
                                  optimizer_args={"lr": lr, "betas": betas, "eps": eps,
                                                  "weight_decay": weight_decay},
                                  timeline_of=lambda: self.timeline, timeout=self.timeout,
                                  prefetch=self.prefetch, units=units)
            self.optimizer = self._stage3.optimizer
            self.buckets, self.flats, self.masters = [], [], []
            return
        item = torch.empty((), dtype=self.dtype).element_size()
        self.buckets = plan_buckets([p.numel() for p in self.params], item,
                                    max(1, int(cap * _MB)), self.world)
        self.flats = [self._flatten(b) for b in self.buckets]
        self.masters = [self._master(k) for k in range(len(self.buckets))]
        self.optimizer = torch.optim.Adam(self.masters, lr=lr, betas=betas, eps=eps,
                                          weight_decay=weight_decay)
        self._grad_flats: list[torch.Tensor] = []
        self._grad_shards: list[torch.Tensor] = []
        self._pending: list[int] = []
        self._bucket_of = {i: k for k, b in enumerate(self.buckets) for i in b.indices}
        self._init_grads()
        for i, p in enumerate(self.params):
            p.register_post_accumulate_grad_hook(self._hook(i))
        self._backward_t0: float | None = None
        self._scale = 1.0 / self.world
        self._divide_by_initial_world_size = True
        self._reduce_order: list[int] = []  # buckets in the order this backward reduced them
        self._last_order: list[int] = list(range(len(self.buckets)))
        self.last_joiner: int | None = None

    # ---- layout ----------------------------------------------------------------------------

    def _flatten(self, b: Bucket) -> torch.Tensor:
        """One bucket's flat buffer; its parameters become views of it; rank 0's values win."""
        flat = torch.zeros(b.padded, dtype=self.dtype, device=self.params[b.indices[0]].device)
        for i, off in zip(b.indices, b.offsets, strict=True):
            p = self.params[i]
            view = flat[off:off + p.numel()].view_as(p)
            view.copy_(p.detach())
            p.data = view
        if self.world > 1:
            dist.broadcast(flat, 0, group=self.group)
        return flat

    def _shard(self, k: int, t: torch.Tensor) -> torch.Tensor:
        """This rank's shard of bucket ``k``'s buffer ``t`` (a view); the whole of it at stage 0."""
        if self.stage == 0:
            return t
        lo, hi = self.buckets[k].shard_range(self.rank)
        return t[lo:hi]

    def _master(self, k: int) -> torch.nn.Parameter:
        """What Adam steps for bucket ``k``: the shard itself (fp32), else an fp32 copy."""
        shard = self._shard(k, self.flats[k])
        if self.dtype == torch.float32:
            return torch.nn.Parameter(shard, requires_grad=False)  # shares the shard's storage
        return torch.nn.Parameter(shard.detach().float().clone(), requires_grad=False)

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

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """``module(*args, **kwargs)``; with a timeline, marks where its backward starts."""
        if self._stage3 is not None:
            return self.module(*args, **kwargs)
        if self._join_config.enable:
            work = Join.notify_join_context(self)  # "not joined yet" (first joinable only)
            active = self.world
            if work is not None and not self._divide_by_initial_world_size:
                work.wait()
                active = int(round(float(work.result()[0].item())))
            self._scale = 1.0 / active
        out = self.module(*args, **kwargs)
        if self.timeline is not None and isinstance(out, torch.Tensor) and out.requires_grad:
            out.register_hook(self._mark_backward)
        return out

    def _mark_backward(self, grad: torch.Tensor) -> None:
        self._backward_t0 = now_us()

    def _lane(self, what: str) -> str:
        return f"rank{self.rank}/{what}"

    def _hook(self, i: int) -> Any:
        def hook(p: torch.Tensor) -> None:
            k = self._bucket_of[i]
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

    # ---- step ------------------------------------------------------------------------------

    def step(self) -> None:
        """Adam on this rank's shards, then all-gather the parameters (stages 1, 2); zeroes
        the full gradient buffers (stages 0, 1) for the next backward.

        Raises:
            RuntimeError: some bucket's gradients were not all produced since the last step.
        """
        if self._stage3 is not None:
            self._stage3.step()
            return
        if any(self._pending):
            raise RuntimeError(f"step() before every gradient was ready: buckets "
                               f"{[k for k, n in enumerate(self._pending) if n]} incomplete "
                               "(a parameter unused in forward, or no backward since the last "
                               "step)")
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
        if len(self._reduce_order) == len(self.buckets):
            self._last_order = self._reduce_order
        self._reduce_order = []

    # ---- Join ------------------------------------------------------------------------------

    def join_hook(self, **kwargs: Any) -> ZeroJoinHook:
        """torch's Join protocol (``divide_by_initial_world_size``, default ``True``)."""
        if self._stage3 is not None:
            raise ValueError("Join is not supported at stage 3 (use stage 0, 1 or 2 with Join)")
        return ZeroJoinHook(self, kwargs.get("divide_by_initial_world_size", True))

    @property
    def join_device(self) -> torch.device:
        return self.params[0].device

    @property
    def join_process_group(self) -> Any:
        return self.group if self.group is not None else dist.group.WORLD  # Join composes

    def _shadow_iteration(self) -> None:
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

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The module's full parameters, ``name -> tensor`` (copies, the module's own names and
        order, frozen parameters included), on every rank at every stage. At stage 3 every rank
        must call it (each unit is all-gathered)."""
        full = self._stage3.full_parameters() if self._stage3 is not None else {}
        return {name: full[id(p)] if id(p) in full else p.detach().clone()
                for name, p in self.module.named_parameters()}

    def close(self) -> None:
        """Stage 3: stop the communication thread and remove the hooks (the module's
        parameters are left sharded: read them with :meth:`full_state_dict` first)."""
        if self._stage3 is not None:
            self._stage3.close()

    def state_tensors(self) -> dict[str, list[torch.Tensor]]:
        """The tensors behind each model state on this rank: ``params`` (the flat parameter
        buffers), ``grads`` (full gradient buffers at stages 0-1, shards at stage 2, and any
        ``.grad`` still set), ``optimizer`` (Adam's state, and fp32 masters when they are
        copies). Storages may repeat; :func:`distlab.zero.measure.storage_bytes` dedupes.
        Stage 3: :meth:`distlab.zero.stage3.Stage3.state_tensors`."""
        if self._stage3 is not None:
            return self._stage3.state_tensors()
        grads = list(self._grad_flats) + list(self._grad_shards)
        grads += [p.grad for p in self.params if p.grad is not None]
        opt = [t for st in self.optimizer.state.values() for t in st.values()
               if isinstance(t, torch.Tensor)]
        if self.dtype != torch.float32:
            opt += list(self.masters)
        return {"params": list(self.flats), "grads": grads, "optimizer": opt}

    @property
    def param_count(self) -> int:
        """Trainable parameters (elements), without padding."""
        return sum(p.numel() for p in self.params)
