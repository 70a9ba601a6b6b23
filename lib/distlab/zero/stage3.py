"""ZeRO stage 3 on live ranks: parameters sharded per unit, gathered just ahead of their compute.

A *unit* is a submodule whose parameters are gathered and freed together (what torch FSDP2's
``fully_shard`` wraps). By default every module with trainable parameters of its own is a unit,
as one would call ``fully_shard`` on each; ``units=`` names others. A unit owns the trainable
parameters in its subtree that no deeper unit owns. Each unit is laid out as one flat buffer
(:func:`distlab.zero.partition.plan_unit`: padded to a multiple of ``N`` ranks) and rank ``r``
keeps only its shard, ``padded / N`` elements, between uses. Per training step, per unit:

- **forward**: in the unit's forward pre-hook the full buffer is all-gathered (its storage
  re-allocated, the parameters are views of it); after its forward the storage is freed again
  (``untyped_storage().resize_(0)``: the views stay, so autograd's saved parameters see the
  data again when it is gathered back).
- **backward**: a hook on the unit's forward outputs runs before its backward: all-gather again,
  and a zeroed full gradient buffer the parameters' ``.grad`` are views of (autograd sums into
  it). When every parameter's gradient is in, the buffer is scaled by ``1/N`` and
  reduce-scattered into the rank's gradient shard, and the parameters are freed.
- **step**: Adam (``torch.optim.Adam``, elementwise) on the shards only: the shard itself for
  fp32, an fp32 master copy for a 16-bit ``param_dtype``. Nothing is gathered after the step;
  the next forward gathers.

**Prefetch** (``prefetch=L``, default 1): in a unit's pre-hook, after its own gather is waited
for, the all-gathers of the next ``L`` units are issued, so they run while this unit computes:
in forward in the order the previous step ran the units' forwards (module order on the first
step), in backward in the reverse order of this step's forward ends. ``prefetch=0`` gathers each
unit only when it is needed. Collectives run in issue order on one communication thread
(:class:`distlab.zero.comm_queue.CommQueue`), the CPU ranks' stand-in for a second CUDA stream; at
most one reduce-scatter is in flight, its gradient buffer kept until the next one is issued. So
the full buffers alive at once are, in forward, ``L + 1`` units' parameters, and in backward
``L + 1`` units' parameters plus two units' gradients
(:func:`distlab.zero.memory_model.stage3_in_flight`).

With a timeline: ``forward unit k`` on ``rank{r}/forward``, ``backward unit k`` on
``rank{r}/backward``, each collective as it really ran on ``rank{r}/all_gather`` and
``rank{r}/reduce_scatter`` (args: unit, bytes, phase, prefetched), each wait of the compute
thread for a gather on ``rank{r}/wait`` (the exposed communication), Adam on ``rank{r}/step``.

Differences from FSDP2: FSDP2 shards every parameter on dim 0 and keeps the root module's
parameters gathered from its forward to its backward; here a unit is one flat buffer and every
unit, root included, is freed after its forward. Adam is elementwise, so the layout does not
change the arithmetic. Not supported: a parameter shared between units, parameters used outside
their unit's forward, gradient accumulation over several backwards, and Join.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch.utils._pytree import tree_flatten

from distlab._checks import check_int
from distlab.timeline import Timeline, now_us
from distlab.uneven import run_bounded
from distlab.zero.calls import all_gather_into, reduce_scatter_sum
from distlab.zero.comm_queue import CommQueue, Pending
from distlab.zero.partition import Bucket, plan_unit

__all__ = ["Stage3", "Unit", "find_units"]


def find_units(module: torch.nn.Module, units: Sequence[torch.nn.Module] | None = None
               ) -> list[tuple[str, torch.nn.Module, list[torch.nn.Parameter]]]:
    """``(module path, unit module, its parameters)`` per unit, in module order.

    ``units`` None: every module with trainable parameters of its own. Otherwise the modules
    named (submodules of ``module``), plus ``module`` itself when parameters remain outside them.
    A unit owns the trainable parameters of its subtree not inside a deeper unit, in
    ``named_parameters`` order; units that own none are dropped.

    Raises:
        ValueError: a unit that is not a submodule of ``module``, or a parameter reachable from
            two units.
    """
    names = {id(m): n for n, m in module.named_modules(remove_duplicate=False)}
    if units is None:
        chosen = [m for m in module.modules()
                  if any(p.requires_grad for p in m.parameters(recurse=False))]
    else:
        chosen = list(units)
        for m in chosen:
            if id(m) not in names:
                raise ValueError(f"units: {type(m).__name__} is not a submodule of the model")
        if module not in chosen:
            chosen.append(module)
    unit_ids = {id(m) for m in chosen}
    owner: dict[int, torch.nn.Module] = {}

    def walk(m: torch.nn.Module, unit: torch.nn.Module) -> None:
        for p in m.parameters(recurse=False):
            if p.requires_grad:
                if id(p) in owner and owner[id(p)] is not unit:
                    raise ValueError(f"a parameter of {names[id(m)] or 'the model'} is shared "
                                     "by two units; ZeRO-3 units must own their parameters")
                owner[id(p)] = unit
        for child in m.children():
            if id(child) not in unit_ids:
                walk(child, unit)

    for u in chosen:
        walk(u, u)
    out = []
    position = {key: at for at, key in enumerate(names)}
    for m in sorted(chosen, key=lambda m: position[id(m)]):
        ps = [p for p in _unique_params(m) if owner.get(id(p)) is m]
        if ps:
            out.append((names[id(m)], m, ps))
    return out


def _unique_params(m: torch.nn.Module) -> list[torch.nn.Parameter]:
    return list(dict.fromkeys(m.parameters()))


@dataclass(eq=False)
class Unit:
    """Runtime state of one unit on this rank (see the module docstring)."""

    index: int
    name: str
    module: torch.nn.Module
    params: list[torch.nn.Parameter]
    layout: Bucket
    flat: torch.Tensor            # full buffer; its storage is 0 bytes while sharded
    shard: torch.Tensor           # this rank's shard, param_dtype, always held
    master: torch.nn.Parameter    # what Adam steps: the shard (fp32) or an fp32 copy
    grad_shard: torch.Tensor      # the reduce-scattered gradient of the shard
    gather: Pending | None = None  # the all-gather issued since the last free
    grad_full: torch.Tensor | None = None
    waiting_grads: int = 0
    backward_t0: float | None = None
    forward_t0: float = 0.0
    hooks: list[Any] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        """Bytes of the full (padded) buffer."""
        return self.layout.padded * self.flat.element_size()


class Stage3:
    """The stage-3 engine behind ``ZeroDataParallel(stage=3)`` (see the module docstring).

    Args:
        module: the model; its unit parameters become views of freed flat buffers.
        rank, world: this rank and the group's size.
        group: the process group of the parameter broadcast at start.
        comm: the (bounded) process group the collectives run on.
        dtype: parameter and gradient dtype.
        algorithm: the collectives' algorithm (``None``, a distlab plan name, ``"builtin"``).
        optimizer_args: ``torch.optim.Adam``'s keyword arguments.
        timeline_of: returns the timeline to record on now (or None).
        timeout: seconds a collective may take.
        prefetch: units gathered ahead (>= 0).
        units: the unit modules, or None (every module with parameters of its own).
    """

    def __init__(self, module: torch.nn.Module, *, rank: int, world: int, group: Any, comm: Any,
                 dtype: torch.dtype, algorithm: str | None, optimizer_args: dict[str, Any],
                 timeline_of: Callable[[], Timeline | None], timeout: float | None,
                 prefetch: int, units: Sequence[torch.nn.Module] | None) -> None:
        self.rank, self.world, self.comm, self.dtype = rank, world, comm, dtype
        self.algorithm, self.timeout, self.timeline_of = algorithm, timeout, timeline_of
        self.prefetch = check_int("prefetch", prefetch, minimum=0)
        self.scale = 1.0 / world
        # a collective ends by the backend's timeout; a wait for it is a backstop beyond that
        self._bound = None if timeout is None else 2 * timeout + 10.0
        self.queue = CommQueue(f"rank{rank}")
        weakref.finalize(self, self.queue.close)
        self.units = [self._unit(k, name, m, ps, group)
                      for k, (name, m, ps) in enumerate(find_units(module, units))]
        if not self.units:
            raise ValueError("module has no trainable parameters")
        self.optimizer = torch.optim.Adam([u.master for u in self.units], **optimizer_args)
        self._unit_of = {id(p): u for u in self.units for p in u.params}
        self._forward_order = list(self.units)   # the order the last forward ran the units
        self._this_forward: list[Unit] = []
        self._forward_ends: list[Unit] = []
        self._reduce: tuple[Pending, torch.Tensor] | None = None
        for u in self.units:
            u.hooks += [u.module.register_forward_pre_hook(self._hook(self._pre_forward, u)),
                        u.module.register_forward_hook(self._hook(self._post_forward, u))]
            for p in u.params:
                u.hooks.append(p.register_post_accumulate_grad_hook(self._grad_hook(u)))
        self._reset_counts()

    # ---- layout ----------------------------------------------------------------------------

    def _unit(self, k: int, name: str, m: torch.nn.Module, params: list[torch.nn.Parameter],
              group: Any) -> Unit:
        """Unit ``k``: rank 0's values broadcast, this rank's shard kept, the full buffer
        freed (the parameters stay views of it)."""
        layout = plan_unit([p.numel() for p in params], self.world)
        flat = torch.zeros(layout.padded, dtype=self.dtype, device=params[0].device)
        for p, off in zip(params, layout.offsets, strict=True):
            view = flat[off:off + p.numel()].view_as(p)
            view.copy_(p.detach())
            p.data = view
        if self.world > 1:
            dist.broadcast(flat, dist.get_global_rank(group, 0) if group is not None else 0,
                           group=group)
        lo, hi = layout.shard_range(self.rank)
        shard = flat[lo:hi].clone()
        master = torch.nn.Parameter(shard if self.dtype == torch.float32
                                    else shard.float(), requires_grad=False)
        flat.untyped_storage().resize_(0)
        return Unit(k, name, m, params, layout, flat, shard, master,
                    torch.zeros_like(shard))

    # ---- gather and free -------------------------------------------------------------------

    def _lane(self, what: str) -> str:
        return f"rank{self.rank}/{what}"

    def _gather(self, u: Unit, phase: str, prefetched: bool) -> None:
        """Issue unit ``u``'s all-gather unless it is gathered or in flight."""
        if u.gather is not None:
            return
        u.flat.untyped_storage().resize_(u.nbytes)
        what = f"all-gather unit {u.index} ({phase})"
        u.gather = self.queue.submit(
            what, "all_gather",
            lambda: self._collective(what, all_gather_into, u.flat, u.shard),
            {"unit": u.index, "bytes": u.nbytes, "phase": phase, "prefetched": prefetched},
            self.timeline_of())

    def _collective(self, what: str, fn: Callable[..., None], out: torch.Tensor,
                    x: torch.Tensor) -> None:
        if self.world > 1:
            run_bounded(self.rank, what, self.timeout, fn, out, x, self.algorithm, self.comm)
        else:
            out.copy_(x)

    def _ensure(self, u: Unit, phase: str) -> None:
        """Unit ``u`` gathered: issued now if it was not, then waited for."""
        self._gather(u, phase, prefetched=False)
        assert u.gather is not None
        t0 = now_us()
        u.gather.wait(self._bound)
        tl = self.timeline_of()
        if tl is not None:
            tl.record(f"wait unit {u.index} ({phase})", "wait", self._lane("wait"), t0,
                      now_us() - t0, {"unit": u.index})

    def _free(self, u: Unit) -> None:
        u.flat.untyped_storage().resize_(0)
        u.gather = None

    def _prefetch(self, order: list[Unit], u: Unit, phase: str) -> None:
        """Issue the gathers of the ``prefetch`` units after ``u`` in ``order``."""
        if self.prefetch and u in order:
            at = order.index(u)
            for nxt in order[at + 1:at + 1 + self.prefetch]:
                self._gather(nxt, phase, prefetched=True)

    # ---- hooks -----------------------------------------------------------------------------

    @staticmethod
    def _hook(fn: Callable[..., Any], u: Unit) -> Callable[..., Any]:
        return lambda _m, *rest: fn(u, *rest)

    def _grad_hook(self, u: Unit) -> Callable[[torch.Tensor], None]:
        def hook(_p: torch.Tensor) -> None:
            u.waiting_grads -= 1
            if u.waiting_grads == 0:
                self._post_backward(u)
        return hook

    def _pre_forward(self, u: Unit, _args: Any) -> None:
        if u not in self._this_forward:
            self._this_forward.append(u)
        self._ensure(u, "forward")
        self._prefetch(self._forward_order, u, "forward")
        u.forward_t0 = now_us()

    def _post_forward(self, u: Unit, _args: Any, output: Any) -> None:
        tl = self.timeline_of()
        if tl is not None:
            tl.record(f"forward unit {u.index}", "forward", self._lane("forward"), u.forward_t0,
                      now_us() - u.forward_t0, {"unit": u.index})
        if u in self._forward_ends:
            self._forward_ends.remove(u)
        self._forward_ends.append(u)
        for t in tree_flatten(output)[0]:
            if isinstance(t, torch.Tensor) and t.requires_grad:
                t.register_hook(lambda g, u=u: self._pre_backward(u, g))
        self._free(u)

    def _pre_backward(self, u: Unit, grad: torch.Tensor) -> torch.Tensor:
        if u.backward_t0 is None:
            self._ensure(u, "backward")
            u.grad_full = torch.zeros(u.layout.padded, dtype=self.dtype, device=u.flat.device)
            for p, off in zip(u.params, u.layout.offsets, strict=True):
                p.grad = u.grad_full[off:off + p.numel()].view_as(p)
            self._prefetch(self._forward_ends[::-1], u, "backward")
            u.backward_t0 = now_us()
        return grad

    def _post_backward(self, u: Unit) -> None:
        """Every gradient of ``u`` is in: scale, reduce-scatter into its shard, free."""
        tl = self.timeline_of()
        t0 = u.backward_t0 if u.backward_t0 is not None else now_us()
        if tl is not None:
            tl.record(f"backward unit {u.index}", "backward", self._lane("backward"), t0,
                      now_us() - t0, {"unit": u.index})
        if u.grad_full is None:
            raise RuntimeError(f"unit {u.index} ({u.name or 'root'}): gradients arrived without "
                               "its forward output's backward (a parameter used outside its "
                               "unit's forward?)")
        full = u.grad_full
        full.mul_(self.scale)
        for p in u.params:
            p.grad = None
        u.grad_full = None
        self._drain_reduce()
        what = f"reduce-scatter unit {u.index}"
        pending = self.queue.submit(
            what, "reduce_scatter",
            lambda: self._collective(what, reduce_scatter_sum, u.grad_shard, full),
            {"unit": u.index, "bytes": u.nbytes}, tl)
        self._reduce = (pending, full)
        self._free(u)

    def _drain_reduce(self) -> None:
        """Wait for the reduce-scatter in flight and drop its gradient buffer."""
        if self._reduce is not None:
            self._reduce[0].wait(self._bound)
            self._reduce = None

    # ---- step ------------------------------------------------------------------------------

    def _reset_counts(self) -> None:
        for u in self.units:
            u.waiting_grads = len(u.params)
            u.backward_t0 = None

    def step(self) -> None:
        """Wait for the last reduce-scatter, then Adam on every unit's shard.

        Raises:
            RuntimeError: some unit's gradients were not all produced since the last step.
        """
        missing = [u.index for u in self.units if u.waiting_grads]
        if missing:
            raise RuntimeError(f"step() before every gradient was ready: units {missing} "
                               "incomplete (a parameter unused in forward, or no backward since "
                               "the last step)")
        self._drain_reduce()
        t0 = now_us()
        for u in self.units:
            u.master.grad = u.grad_shard if self.dtype == torch.float32 else u.grad_shard.float()
        self.optimizer.step()
        for u in self.units:
            if self.dtype != torch.float32:
                u.shard.copy_(u.master.detach())
            u.master.grad = None
        tl = self.timeline_of()
        if tl is not None:
            tl.record("Adam step", "step", self._lane("step"), t0, now_us() - t0)
        if len(self._this_forward) == len(self.units):
            self._forward_order = self._this_forward
        self._this_forward, self._forward_ends = [], []
        self._reset_counts()

    # ---- what this rank holds --------------------------------------------------------------

    def full_parameters(self) -> dict[int, torch.Tensor]:
        """``id(parameter) -> a copy of its full value`` for every unit parameter (collective:
        every rank calls it; each unit is gathered and freed again)."""
        self._drain_reduce()
        out: dict[int, torch.Tensor] = {}
        for u in self.units:
            held = u.gather is not None
            self._ensure(u, "state dict")
            for p, off in zip(u.params, u.layout.offsets, strict=True):
                out[id(p)] = u.flat[off:off + p.numel()].view_as(p).detach().clone()
            if not held:
                self._free(u)
        return out

    def state_tensors(self) -> dict[str, list[torch.Tensor]]:
        """Tensors behind each state: ``params`` (shards, and full buffers now gathered),
        ``grads`` (shards, full gradient buffers alive), ``optimizer`` (Adam's state, and fp32
        masters when they are copies)."""
        params = [u.shard for u in self.units]
        params += [u.flat for u in self.units if u.flat.untyped_storage().nbytes()]
        grads = [u.grad_shard for u in self.units]
        grads += [u.grad_full for u in self.units if u.grad_full is not None]
        if self._reduce is not None:
            grads.append(self._reduce[1])
        opt = [t for st in self.optimizer.state.values() for t in st.values()
               if isinstance(t, torch.Tensor)]
        if self.dtype != torch.float32:
            opt += [u.master for u in self.units]
        return {"params": params, "grads": grads, "optimizer": opt}

    def close(self) -> None:
        """Stop the communication thread and remove the hooks."""
        self.queue.close()
        for u in self.units:
            for h in u.hooks:
                h.remove()
            u.hooks.clear()
