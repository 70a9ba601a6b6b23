"""ZeRO stage 3 on live ranks: parameters sharded per unit, gathered just ahead of their compute.

A *unit* is a submodule whose parameters are gathered and freed together (what torch FSDP2's
``fully_shard`` wraps). By default every module with trainable parameters of its own is a unit,
as one would call ``fully_shard`` on each; ``units=`` names others. A unit owns the trainable
parameters in its subtree that no deeper unit owns. Each unit is laid out as one flat buffer
(:func:`distlab.zero.partition.plan_unit`: padded to a multiple of ``N`` ranks) and rank ``r``
keeps only its shard, ``padded / N`` elements in the parameters' own dtype, between uses. Per
training step, per unit:

- **forward**: in the unit's forward pre-hook the full buffer is all-gathered (its storage
  re-allocated, the parameters are views of it); after its forward the storage is freed again
  (``untyped_storage().resize_(0)``: the views stay, so autograd's saved parameters see the
  data again when it is gathered back).
- **backward**: a hook on the unit's forward outputs runs before its backward, once per
  backward: all-gather again, and a full gradient buffer the parameters' ``.grad`` are views of
  (autograd sums into it in place). When every parameter's gradient is in, or when autograd
  ends the backward (a callback queued on its engine, as FSDP2's post-backward callback: units
  some of whose parameters got no gradient end there), the buffer is scaled by ``1/N`` and
  reduce-scattered into the rank's gradient shard (set by the first reduction after a step,
  added to by later ones), and the parameters are freed.
- **step**: the optimizer (:mod:`distlab.zero.optim`: Adam by default, any ``torch.optim``
  class or factory) steps each parameter's slice of the shard, as FSDP2's optimizer steps each
  parameter's local shard; a parameter that got no gradient since the last step has a ``None``
  gradient and is skipped (its value and its optimizer state stay as they were). Nothing is
  gathered after the step; the next forward gathers.

**Gradient accumulation**: several backwards before :meth:`Stage3.step`. With sync on (the
default) each backward reduce-scatters and the gradient shards add up; with ``sync`` off
(``ZeroDataParallel.set_requires_gradient_sync(False)`` or ``no_sync()``, FSDP2's names) the
full gradient buffers are kept and summed into, and the next backward with sync on (or the end
of it, for units it did not reach) reduces the sum, or :meth:`Stage3.finish_gradient_sync`
reduces it at once (what a pipeline stage calls after its last backward of a step).

**Mixed precision**, FSDP2's ``MixedPrecisionPolicy(param_dtype, reduce_dtype)``: the shards
(and the optimizer) stay in the parameters' own dtype, starting from their own values; the
shard is cast to ``param_dtype`` before its all-gather, so the gathered unit, the compute and
the full gradients are ``param_dtype``; each unit's floating-point forward inputs are cast to
it; gradients are reduce-scattered in ``reduce_dtype`` (accumulated in it with sync off) and
cast to the shard's dtype after.

**Prefetch** (``prefetch=L``, default 1): in a unit's pre-hook, after its own gather is waited
for, the all-gathers of the next ``L`` units are issued, so they run while this unit computes:
in forward in the order the previous step ran the units' forwards (module order on the first
step), in backward in the reverse order of this backward's forward ends. ``prefetch=0``
gathers each unit only when it is needed; a prefetched unit that was not used is freed at the
step. Collectives run in issue order on one communication thread
(:class:`distlab.zero.comm_queue.CommQueue`), the CPU ranks' stand-in for a second CUDA stream; at
most one reduce-scatter is in flight, its gradient buffer kept until the next one is issued. So
the full buffers alive at once are, in forward, ``L + 1`` units' parameters, and in backward
``L + 1`` units' parameters plus two units' gradients
(:func:`distlab.zero.memory_model.stage3_memory`).

With a timeline: ``forward unit k`` on ``rank{r}/forward``, ``backward unit k`` on
``rank{r}/backward``, each collective as it really ran on ``rank{r}/all_gather`` and
``rank{r}/reduce_scatter`` (args: unit, bytes, phase, prefetched), each wait of the compute
thread for a gather on ``rank{r}/wait`` (the exposed communication), the optimizer's step
(``Adam step``, whatever the optimizer) on ``rank{r}/step``.

Differences from FSDP2: FSDP2 shards every parameter on dim 0 and keeps the root module's
parameters gathered from its forward to its backward; here a unit is one flat buffer and every
unit, root included, is freed after its forward. An elementwise optimizer does the same
arithmetic on either layout; one that reads a whole tensor (a norm, row statistics) sees
FSDP2's DTensor but only the slice here. FSDP2 averages in the reduce-scatter (``ReduceOp.AVG``
for fp32 and bf16) where distlab scales by ``1/N`` before summing: the same on 2 ranks, the last
bits apart on more. Not supported: a parameter shared between units, parameters used outside
their unit's forward, and Join.
"""

from __future__ import annotations

import enum
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch.autograd import Variable
from torch.utils._pytree import tree_flatten, tree_map

from distlab._checks import check_int
from distlab.collectives.runtime.by_name import all_gather_into, reduce_scatter_sum
from distlab.timeline import Timeline, now_us
from distlab.uneven import run_bounded
from distlab.zero.comm_queue import CommQueue, Pending
from distlab.zero.partition import Bucket, plan_unit

__all__ = ["Stage3", "Unit", "UnitState", "find_units"]


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


class UnitState(enum.Enum):
    """Where a unit's full buffer is: ``SHARDED`` (freed: only the shard is held),
    ``GATHERING`` (its all-gather issued, not yet waited for), ``GATHERED`` (waited for: the
    forward computes on it), ``BACKWARD`` (gathered for this backward, its full gradient buffer
    live until the unit's post-backward)."""

    SHARDED = "sharded"
    GATHERING = "gathering"
    GATHERED = "gathered"
    BACKWARD = "backward"


@dataclass(eq=False)
class Unit:
    """Runtime state of one unit on this rank (see the module docstring)."""

    index: int
    name: str
    module: torch.nn.Module
    params: list[torch.nn.Parameter]
    layout: Bucket
    flat: torch.Tensor            # full buffer in param_dtype; storage 0 bytes while sharded
    shard: torch.Tensor           # this rank's shard in the parameters' own dtype, always held
    pieces: list[torch.nn.Parameter]  # per parameter, its slice of ``shard`` (may be empty)
    grad_shard: torch.Tensor      # the reduce-scattered gradient of the shard (own dtype)
    state: UnitState = UnitState.SHARDED
    gather: Pending | None = None  # the all-gather issued since the last free
    grad_full: torch.Tensor | None = None   # full gradient (param_dtype) autograd sums into
    acc_full: torch.Tensor | None = None    # sync off: gradients summed in reduce_dtype
    got: set[int] = field(default_factory=set)       # parameters with a gradient this backward
    unreduced: set[int] = field(default_factory=set)  # sync off: gradients not reduced yet
    stepped: set[int] = field(default_factory=set)   # parameters whose grad_shard is set
    backward_t0: float | None = None
    forward_t0: float = 0.0
    hooks: list[Any] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        """Bytes of the full (padded) buffer."""
        return self.layout.padded * self.flat.element_size()


def _pieces(shard: torch.Tensor, layout: Bucket, rank: int) -> list[torch.nn.Parameter]:
    """Each parameter's slice of this rank's ``shard`` as a leaf the optimizer steps (it shares
    the shard's storage; empty where the rank holds none of that parameter)."""
    lo, hi = layout.shard_range(rank)
    out = []
    for off, n in zip(layout.offsets, (b - a for a, b in _spans(layout)), strict=True):
        a, b = max(lo, off), min(hi, off + n)
        part = shard[a - lo:b - lo] if a < b else shard[:0]
        out.append(torch.nn.Parameter(part, requires_grad=False))
    return out


def _spans(layout: Bucket) -> list[tuple[int, int]]:
    ends = [*layout.offsets[1:], layout.numel]
    return list(zip(layout.offsets, ends, strict=True))


def _slice(layout: Bucket, rank: int, i: int, t: torch.Tensor) -> torch.Tensor:
    """Parameter ``i``'s slice of a shard-sized tensor ``t`` (as :func:`_pieces`)."""
    lo, hi = layout.shard_range(rank)
    off, end = _spans(layout)[i]
    a, b = max(lo, off), min(hi, end)
    return t[a - lo:b - lo] if a < b else t[:0]


class Stage3:
    """The stage-3 engine behind ``ZeroDataParallel(stage=3)`` (see the module docstring), a
    :class:`distlab.zero.engine.ZeroEngine`.

    Args:
        module: the model; its unit parameters become views of freed flat buffers.
        rank, world: this rank and the group's size.
        group: the process group of the parameter broadcast at start.
        comm: the (bounded) process group the collectives run on.
        param_dtype: dtype of the gathered parameters, the compute and the full gradients
            (``None``: the parameters' own).
        reduce_dtype: dtype the gradients are reduced (and accumulated with sync off) in
            (``None``: ``param_dtype``).
        algorithm: the collectives' algorithm (``None``, a distlab plan name, ``"builtin"``).
        make_optimizer: ``params -> torch.optim.Optimizer`` over the shard slices.
        timeline_of: returns the timeline to record on now (or None).
        timeout: seconds a collective may take.
        prefetch: units gathered ahead (>= 0).
        units: the unit modules, or None (every module with parameters of its own).

    Raises:
        ValueError: a unit whose parameters have more than one dtype, or no trainable
            parameters.
    """

    def __init__(self, module: torch.nn.Module, *, rank: int, world: int, group: Any, comm: Any,
                 param_dtype: torch.dtype | None, reduce_dtype: torch.dtype | None,
                 algorithm: str | None,
                 make_optimizer: Callable[[list[torch.Tensor]], torch.optim.Optimizer],
                 timeline_of: Callable[[], Timeline | None], timeout: float | None,
                 prefetch: int, units: Sequence[torch.nn.Module] | None) -> None:
        self.rank, self.world, self.comm = rank, world, comm
        self.param_dtype, self.reduce_dtype = param_dtype, reduce_dtype
        self.algorithm, self.timeout, self.timeline_of = algorithm, timeout, timeline_of
        self.prefetch = check_int("prefetch", prefetch, minimum=0)
        self.scale = 1.0 / world
        self.sync = True
        # a collective ends by the backend's timeout; a wait for it is a backstop beyond that
        self._bound = None if timeout is None else 2 * timeout + 10.0
        self.queue = CommQueue(f"rank{rank}")
        weakref.finalize(self, self.queue.close)
        self.module = module
        self.units = [self._unit(k, name, m, ps, group)
                      for k, (name, m, ps) in enumerate(find_units(module, units))]
        if not self.units:
            raise ValueError("module has no trainable parameters")
        self.optimizer = make_optimizer([p for u in self.units for p in u.pieces])
        self._unit_of = {id(p): u for u in self.units for p in u.params}
        self._forward_order = list(self.units)   # the order the last forward ran the units
        self._this_forward: list[Unit] = []
        self._forward_ends: list[Unit] = []
        self._reduce: tuple[Pending, torch.Tensor] | None = None
        self._callback_queued = False
        self._error: BaseException | None = None
        for u in self.units:
            u.hooks += [u.module.register_forward_pre_hook(self._hook(self._pre_forward, u),
                                                           with_kwargs=True),
                        u.module.register_forward_hook(self._hook(self._post_forward, u))]
            for i, p in enumerate(u.params):
                u.hooks.append(p.register_post_accumulate_grad_hook(self._grad_hook(u, i)))

    # ---- layout ----------------------------------------------------------------------------

    def _unit(self, k: int, name: str, m: torch.nn.Module, params: list[torch.nn.Parameter],
              group: Any) -> Unit:
        """Unit ``k``: rank 0's values broadcast, this rank's shard kept in the parameters' own
        dtype, a full ``param_dtype`` buffer (freed) that the parameters are views of."""
        dtypes = {p.dtype for p in params}
        if len(dtypes) != 1:
            raise ValueError(f"unit {name or 'root'}: parameters of dtypes "
                             f"{sorted(map(str, dtypes))}; a unit is one flat buffer of one dtype")
        own = params[0].dtype
        layout = plan_unit([p.numel() for p in params], self.world)
        full = torch.zeros(layout.padded, dtype=own, device=params[0].device)
        for p, off in zip(params, layout.offsets, strict=True):
            full[off:off + p.numel()].copy_(p.detach().reshape(-1))
        if self.world > 1:
            dist.broadcast(full, dist.get_global_rank(group, 0) if group is not None else 0,
                           group=group)
        lo, hi = layout.shard_range(self.rank)
        shard = full[lo:hi].clone()
        compute = self.param_dtype or own
        flat = full if compute == own else torch.zeros(layout.padded, dtype=compute,
                                                       device=full.device)
        for p, off in zip(params, layout.offsets, strict=True):
            p.data = flat[off:off + p.numel()].view_as(p)
        flat.untyped_storage().resize_(0)
        return Unit(k, name, m, params, layout, flat, shard, _pieces(shard, layout, self.rank),
                    torch.zeros_like(shard))

    # ---- gather and free -------------------------------------------------------------------

    def _lane(self, what: str) -> str:
        return f"rank{self.rank}/{what}"

    def _gather(self, u: Unit, phase: str, prefetched: bool) -> None:
        """Issue unit ``u``'s all-gather unless it is gathered or in flight (the shard cast to
        ``param_dtype`` first, as FSDP2 casts before its all-gather)."""
        if u.state is not UnitState.SHARDED:
            return
        u.state = UnitState.GATHERING
        u.flat.untyped_storage().resize_(u.nbytes)
        src = u.shard if u.shard.dtype == u.flat.dtype else u.shard.to(u.flat.dtype)
        what = f"all-gather unit {u.index} ({phase})"
        u.gather = self.queue.submit(
            what, "all_gather",
            lambda: self._collective(what, all_gather_into, u.flat, src),
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
        if u.state is UnitState.GATHERING:
            u.state = UnitState.GATHERED
        tl = self.timeline_of()
        if tl is not None:
            tl.record(f"wait unit {u.index} ({phase})", "wait", self._lane("wait"), t0,
                      now_us() - t0, {"unit": u.index})

    def _free(self, u: Unit) -> None:
        if u.gather is not None:
            u.gather.wait(self._bound)   # a prefetch nobody used: let it land before freeing
        u.flat.untyped_storage().resize_(0)
        u.gather = None
        u.state = UnitState.SHARDED

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

    def _grad_hook(self, u: Unit, i: int) -> Callable[[torch.Tensor], None]:
        def hook(_p: torch.Tensor) -> None:
            if u.state is not UnitState.BACKWARD:
                raise RuntimeError(f"unit {u.index} ({u.name or 'root'}): gradients arrived "
                                   "without its forward output's backward (a parameter used "
                                   "outside its unit's forward?)")
            u.got.add(i)
            if len(u.got) == len(u.params):
                self._post_backward(u)
        return hook

    def _pre_forward(self, u: Unit, args: Any, kwargs: Any) -> tuple[Any, Any] | None:
        if u not in self._this_forward:
            self._this_forward.append(u)
        self._ensure(u, "forward")
        self._prefetch(self._forward_order, u, "forward")
        u.forward_t0 = now_us()
        if self.param_dtype is None:
            return None
        return tree_map(self._cast_input, args), tree_map(self._cast_input, kwargs)

    def _cast_input(self, x: Any) -> Any:
        """FSDP2's ``cast_forward_inputs``: floating-point tensors to ``param_dtype``."""
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != self.param_dtype:
            return x.to(self.param_dtype)
        return x

    def _post_forward(self, u: Unit, _args: Any, output: Any) -> None:
        tl = self.timeline_of()
        if tl is not None:
            tl.record(f"forward unit {u.index}", "forward", self._lane("forward"), u.forward_t0,
                      now_us() - u.forward_t0, {"unit": u.index})
        if u in self._forward_ends:
            self._forward_ends.remove(u)
        self._forward_ends.append(u)
        if torch.is_grad_enabled():
            for t in tree_flatten(output)[0]:
                if isinstance(t, torch.Tensor) and t.requires_grad:
                    t.register_hook(lambda g, u=u: self._pre_backward(u, g))
        if u.state is not UnitState.BACKWARD:   # a recomputation inside backward keeps it
            self._free(u)

    def _pre_backward(self, u: Unit, grad: torch.Tensor) -> torch.Tensor:
        if not self._callback_queued:
            self._callback_queued = True
            Variable._execution_engine.queue_callback(self._end_backward)
        if u.state is not UnitState.BACKWARD:
            u.got = set()
            self._ensure(u, "backward")
            u.state = UnitState.BACKWARD
            if u.grad_full is None:
                u.grad_full = torch.zeros(u.layout.padded, dtype=u.flat.dtype,
                                          device=u.flat.device)
            # autograd sums each parameter's gradient into its view, in place
            for p, off in zip(u.params, u.layout.offsets, strict=True):
                p.grad = u.grad_full[off:off + p.numel()].view_as(p)
            self._prefetch(self._forward_ends[::-1], u, "backward")
            u.backward_t0 = now_us()
        return grad

    def _post_backward(self, u: Unit) -> None:
        """Unit ``u``'s backward is over (every gradient in, or the backward ended): with sync
        on, scale and reduce-scatter what it holds into its gradient shard; with sync off, keep
        it (summed in ``reduce_dtype`` when that differs); free the parameters."""
        if u.state is not UnitState.BACKWARD:
            return
        tl = self.timeline_of()
        t0 = u.backward_t0 if u.backward_t0 is not None else now_us()
        if tl is not None:
            tl.record(f"backward unit {u.index}", "backward", self._lane("backward"), t0,
                      now_us() - t0, {"unit": u.index})
        u.backward_t0 = None
        got, u.got = u.got, set()
        if got:
            u.unreduced |= got
            self._fold_into_reduce_dtype(u, keep=not self.sync)
        if self.sync:
            self._reduce_unit(u)
        self._free(u)

    def _fold_into_reduce_dtype(self, u: Unit, keep: bool) -> None:
        """With ``reduce_dtype`` unlike ``param_dtype``, add the full gradient into the
        ``reduce_dtype`` sum (FSDP2's accumulated unsharded gradient); ``keep``: zero the full
        gradient for the next backward instead of dropping it."""
        rd = self.reduce_dtype
        if rd is None or u.grad_full is None or rd == u.grad_full.dtype:
            return
        if u.acc_full is None:
            u.acc_full = u.grad_full.to(rd)
        else:
            u.acc_full += u.grad_full
        if keep:
            u.grad_full.zero_()

    def _reduce_unit(self, u: Unit) -> None:
        """Reduce-scatter unit ``u``'s unreduced gradients (if any) into its gradient shard:
        set on the first reduction since the step, added after."""
        full = u.acc_full if u.acc_full is not None else u.grad_full
        for p in u.params:
            p.grad = None
        u.grad_full = u.acc_full = None
        if not u.unreduced or full is None:
            return
        rd = self.reduce_dtype or full.dtype
        if full.dtype != rd:
            full = full.to(rd)
        full.mul_(self.scale)
        first = not u.stepped
        u.stepped |= u.unreduced
        u.unreduced = set()
        out = u.grad_shard if first and rd == u.grad_shard.dtype else torch.empty(
            u.grad_shard.shape, dtype=rd, device=full.device)

        def reduce() -> None:
            self._collective(what, reduce_scatter_sum, out, full)
            if out is not u.grad_shard:
                if first:
                    u.grad_shard.copy_(out)
                else:
                    u.grad_shard.add_(out.to(u.grad_shard.dtype))

        self._drain_reduce()
        what = f"reduce-scatter unit {u.index}"
        pending = self.queue.submit(what, "reduce_scatter", reduce,
                                    {"unit": u.index, "bytes": full.numel() * full.element_size()},
                                    self.timeline_of())
        self._reduce = (pending, full)

    def _end_backward(self) -> None:
        """Run by autograd when a backward ends: units it reached whose gradients are not all
        in (parameters unused this time) end their backward with what they got; with sync on,
        units holding gradients from backwards with sync off reduce them (FSDP2's post-backward
        callback). Units in reverse module order, the same on every rank."""
        self._callback_queued = False
        for u in reversed(self.units):
            if u.state is UnitState.BACKWARD:
                self._post_backward(u)
            elif self.sync and u.unreduced:
                self._fold_into_reduce_dtype(u, keep=False)
                self._reduce_unit(u)
        self._forward_ends = []

    def finish_gradient_sync(self) -> None:
        """Reduce-scatter now the gradients every unit accumulated with sync off (units in
        reverse module order, as the end of a backward with sync on does)."""
        for u in reversed(self.units):
            if u.unreduced and u.state is not UnitState.BACKWARD:
                self._fold_into_reduce_dtype(u, keep=False)
                self._reduce_unit(u)

    def _drain_reduce(self) -> None:
        """Wait for the reduce-scatter in flight and drop its gradient buffer."""
        if self._reduce is not None:
            self._reduce[0].wait(self._bound)
            self._reduce = None

    def after_forward(self, output: Any) -> None:
        """Nothing: the units' own hooks follow forward and backward."""

    # ---- step ------------------------------------------------------------------------------

    def step(self) -> None:
        """Wait for the last reduce-scatter, then the optimizer on the shard slices of the
        parameters that got a gradient since the last step (the others keep their values and
        their optimizer state, as FSDP2's ``None`` gradients do).

        Raises:
            RuntimeError: gradients accumulated with sync off that no backward with sync on
                reduced.
        """
        held = [u.index for u in self.units if u.unreduced]
        if held:
            raise RuntimeError(f"step() with gradients of units {held} accumulated but never "
                               "reduced: run the last backward before step() with "
                               "set_requires_gradient_sync(True)")
        self._drain_reduce()
        t0 = now_us()
        for u in self.units:
            for i in u.stepped:
                u.pieces[i].grad = _slice(u.layout, self.rank, i, u.grad_shard)
        self.optimizer.step()
        for u in self.units:
            for i in u.stepped:
                u.pieces[i].grad = None
            u.stepped = set()
        tl = self.timeline_of()
        if tl is not None:
            tl.record("Adam step", "step", self._lane("step"), t0, now_us() - t0)
        for u in self.units:   # a prefetch nobody used holds the values from before the step
            if u.state in (UnitState.GATHERING, UnitState.GATHERED):
                self._free(u)
        if len(self._this_forward) == len(self.units):
            self._forward_order = self._this_forward
        self._this_forward, self._forward_ends = [], []

    # ---- state dict ------------------------------------------------------------------------

    def sharded_ids(self) -> set[int]:
        """``id`` of every parameter held as shards (the units' parameters)."""
        return {id(p) for u in self.units for p in u.params}

    def full_parameters(self) -> dict[int, torch.Tensor]:
        """``id(parameter) -> its full value`` in the parameters' own dtype for every unit
        parameter (collective: every rank calls it; the shards are all-gathered into a
        temporary buffer, not the compute one)."""
        self._drain_reduce()
        out: dict[int, torch.Tensor] = {}
        for u in self.units:
            full = torch.empty(u.layout.padded, dtype=u.shard.dtype, device=u.shard.device)
            done = self.queue.submit(f"all-gather unit {u.index} (state dict)", "all_gather",
                                     lambda u=u, full=full: self._collective(
                                         "state dict", all_gather_into, full, u.shard))
            done.wait(self._bound)
            for p, off in zip(u.params, u.layout.offsets, strict=True):
                out[id(p)] = full[off:off + p.numel()].view(p.shape).clone()
        return out

    def load_parameters(self, values: dict[int, torch.Tensor]) -> None:
        """Write full values ``id(parameter) -> tensor`` (every unit parameter) into this
        rank's shards (cast to the shards' dtype); nothing is communicated."""
        self._drain_reduce()
        for u in self.units:
            if u.state in (UnitState.GATHERING, UnitState.GATHERED):
                self._free(u)   # the next forward gathers the loaded values
            lo, hi = u.layout.shard_range(self.rank)
            full = torch.zeros(u.layout.padded, dtype=u.shard.dtype, device=u.shard.device)
            for p, off in zip(u.params, u.layout.offsets, strict=True):
                full[off:off + p.numel()].copy_(values[id(p)].reshape(-1))
            u.shard.copy_(full[lo:hi])

    # ---- what this rank holds --------------------------------------------------------------

    def state_tensors(self) -> dict[str, list[torch.Tensor]]:
        """Tensors behind each state: ``params`` (shards, and full buffers now gathered),
        ``grads`` (shards, full gradient buffers alive), ``optimizer`` (the optimizer's
        state)."""
        params = [u.shard for u in self.units]
        params += [u.flat for u in self.units if u.state is not UnitState.SHARDED]
        grads = [u.grad_shard for u in self.units]
        grads += [t for u in self.units for t in (u.grad_full, u.acc_full) if t is not None]
        if self._reduce is not None:
            grads.append(self._reduce[1])
        opt = [t for st in self.optimizer.state.values() for t in st.values()
               if isinstance(t, torch.Tensor)]
        return {"params": params, "grads": grads, "optimizer": opt}

    def close(self) -> None:
        """Stop the communication thread and remove the hooks."""
        self.queue.close()
        for u in self.units:
            for h in u.hooks:
                h.remove()
            u.hooks.clear()
