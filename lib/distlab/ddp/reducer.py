"""The reducer of distlab's DDP: gradient buckets, reduced while backward still runs.

:class:`Reducer` is torch's ``Reducer`` (``torch/csrc/distributed/c10d/reducer.cpp``) in Python:
it owns the bucket state and every gradient collective; :class:`~distlab.ddp.wrapper.DDP`, the
module wrapper, owns it and calls it around each forward.

On every synced backward each parameter's post-accumulate-grad hook counts its bucket down; when a
bucket's last gradient is in, the bucket is filled in a few tensor ops
(:class:`~distlab.ddp.grad_bucket.BucketLayout`: one ``torch._foreach_copy_`` for the small
gradients and one ``mul_`` by ``1/world`` per run of them, one ``torch.mul(grad, 1/world,
out=view)`` per large one -- torch's reducer does the latter for every parameter) and, once every
earlier bucket has been launched, its allreduce starts (async with the built-in allreduce;
``overlap=False`` launches all buckets after backward). A callback queued on the autograd engine
waits for them at the end of backward and copies the sums back into ``.grad`` (one
``torch._foreach_copy_`` per bucket). Iteration 0 uses one bucket per dtype; the first synced
backward records the gradient-ready order and the buckets are rebuilt from it exactly as torch
rebuilds them (:func:`distlab.ddp.buckets.rebuilt_buckets`). Nothing in backward reads a tensor's
value on the host (no ``.item()``, ``.cpu()`` or synchronize), so with CUDA parameters the
copies, scaling and NCCL allreduces are queued on streams without blocking the host.

Per-step cost on the hot path (no timeline, built-in allreduce, no hook): per parameter one Python
hook call (an iteration stamp and a list decrement); per bucket the fill above, the allreduce
call, one wait and one copy-back. Results are bitwise those of torch DDP: the bucket holds
``grad * (1/world)`` (the same single rounding as torch's ``mul_out`` with its wrapped double
scalar), summed by the same allreduce.

``gradient_as_bucket_view=True`` (as in torch): a gradient that is not yet a view into its bucket
is copied (times ``1/world``) into it and ``param.grad`` becomes that view; from then on autograd
accumulates straight into the bucket, which is divided in place by ``world`` (one ``div_`` per
bucket, as torch's ``bucket_view.div_(div_factor)``) and reduced; no copy either way.
``register_comm_hook(state, hook)``: ``hook(state, bucket)`` replaces the allreduce and the
division (see :mod:`distlab.ddp.comm_hooks`).

With ``algorithm`` other than ``"builtin"`` each bucket goes through
:func:`distlab.collectives.all_reduce` (synchronous p2p schedules), so it blocks backward at the
moment the bucket is launched. ``naive=True`` reduces every parameter on its own after backward.
Timeline (only when ``timeline`` is set; the hot path then pays for it): lanes
``rank{r}/backward`` (one span per module owning parameters, from the previous module's last ready
gradient -- or the end of forward -- to its own, ``naive=True`` included; "bucket ready" marks) and
``rank{r}/allreduce`` (launch to completion of each bucket's allreduce, or of each parameter's with
``naive=True``). Times are in us.

Which hooks count, as in torch's reducer: those between a synced forward (the latest, when a
GAN discriminator runs two before one backward) and the end of the backward that reduced
(``expect_autograd_hooks_``); a second backward of the same iteration (``retain_graph=True``)
accumulates into ``.grad`` locally, unsynced, and records nothing. Each parameter is marked ready
once per iteration, and recorded once in the order the buckets are rebuilt from; a second mark
(one layer under two reentrant ``checkpoint`` calls) raises torch's "Expected to mark a variable
ready only once", naming the parameter.

Unused parameters, as torch's reducer handles them. ``find_unused_parameters=False`` (default)
expects a gradient for every parameter in every synced iteration: buckets still waiting at the end
of a backward are not reduced, a later backward of the same iteration may bring the missing
gradients, and otherwise the next forward raises (as torch), naming the parameters that got none.
``find_unused_parameters=True`` walks the autograd graph from the forward's outputs and marks the
parameters it does not reach ready (zeros, or their accumulated gradient) at the first gradient
hook; a map of locally used parameters is summed over the ranks after the last bucket, and a
parameter no rank used keeps its ``.grad`` untouched (``None`` stays ``None``). Its buckets are
torch's: sized in parameter order, never rebuilt. ``static_graph=True``: the first synced backward
reduces every bucket at its end, records the unused parameters once (its reduction queued from the
outputs' backward, torch's ``_DDPSink``, so it runs after the whole backward, reentrant ones inside
it included), and the buckets are rebuilt after the second; from then on a parameter is ready once
its hooks have fired as often as in the first backward, and a graph that changes raises torch's
error (used now but not then: in backward; used then but not now: at the next forward). Every
rebuild takes group rank 0's assignment (torch's ``sync_bucket_indices``), so all ranks reduce the
same buckets whatever each one used.

Under ``Join`` (:mod:`distlab.ddp.join`) a joined rank's reducer shadows the others' gradient
collectives with zeros (:meth:`Reducer.shadow_backward`). Every collective runs on the bounded
group ``comm`` and every wait is bounded by ``timeout`` (:func:`distlab.uneven.run_bounded`).
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
import torch.distributed as dist
import torch.utils._pytree as pytree
from torch import nn

from distlab.collectives.runtime.execute import all_reduce
from distlab.ddp.buckets import initial_buckets, rebuilt_buckets, unused_initial_buckets
from distlab.ddp.comm_hooks import check_comm_hook
from distlab.ddp.grad_bucket import BucketLayout
from distlab.timeline import now_us
from distlab.uneven import run_bounded

__all__ = ["Reducer", "reached_parameters"]

_queue_callback = torch.autograd.Variable._execution_engine.queue_callback


def _aliases(grad: torch.Tensor, view: torch.Tensor) -> bool:
    """torch's ``grad.is_alias_of(bucket_view)`` (same storage); identity first (the usual case)."""
    return grad is view or torch._C._is_alias_of(grad, view)


def reached_parameters(output: Any) -> set[int]:
    """``id`` of every leaf tensor whose gradient accumulator the autograd graph of the tensors
    in ``output`` (any nesting of lists, tuples, dicts) reaches: torch's
    ``search_unused_parameters`` walk, in Python."""
    seen: set[Any] = set()
    found: set[int] = set()
    stack = [t.grad_fn for t in pytree.tree_leaves(output)
             if isinstance(t, torch.Tensor) and t.grad_fn is not None]
    while stack:
        fn = stack.pop()
        if fn in seen:
            continue
        seen.add(fn)
        var = getattr(fn, "variable", None)
        if var is not None:
            found.add(id(var))
        stack.extend(nxt for nxt, _ in fn.next_functions if nxt is not None)
    return found


class _FirstBackwardSink(torch.autograd.Function):
    """torch's ``_DDPSink`` for ``static_graph``'s first iteration: the forward's outputs
    pass through it (cloned, as torch's default ``_ddp_sink_clone``), so its backward runs first
    in the outermost backward, and the reduction queued there runs when that whole backward
    ends (a hook may fire inside a reentrant backward, whose own end comes earlier)."""

    @staticmethod
    def forward(ctx: Any, reducer_ref: Any, *tensors: torch.Tensor) -> Any:
        ctx.set_materialize_grads(False)
        ctx.reducer_ref = reducer_ref
        return tuple(t.clone() for t in tensors)

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        reducer = ctx.reducer_ref()
        if reducer is not None:
            reducer.queue_static_first()
        return (None, *grads)


class Reducer:
    """The gradient buckets of one DDP and their reduction (see the module docstring).

    Args:
        named: ``(name, parameter)`` of every parameter to reduce, in the module's order (at
            least one); their post-accumulate-grad hooks are registered here.
        comm: the process group every gradient collective runs on (the bounded group).
        rank, world: this rank in ``comm``'s group and its size.
        timeout: seconds a gradient collective may wait (``None``: the group's own timeout).
        bucket_cap_mb, overlap, algorithm, builtin, naive, gradient_as_bucket_view,
        find_unused_parameters, static_graph: DDP's arguments (``builtin``: ``algorithm`` is
            torch's built-in allreduce).
        timeline: a :class:`~distlab.timeline.Timeline` to record on, or ``None``.

    Attributes the wrapper reads and writes: ``sync`` (a forward's backward reduces: ``False``
    under ``no_sync``), ``timeline``, ``buckets`` (parameter names per bucket, in reduction order),
    ``layouts`` (one :class:`~distlab.ddp.grad_bucket.BucketLayout` per bucket), ``params``,
    ``names``, ``allreduce_count`` (bucket or parameter collectives issued),
    ``shadow_count`` (zero-filled collectives issued as a joined rank).
    """

    def __init__(self, named: list[tuple[str, nn.Parameter]], *, comm: Any, rank: int,
                 world: int, timeout: float | None, bucket_cap_mb: float | None, overlap: bool,
                 algorithm: str, builtin: bool, naive: bool, gradient_as_bucket_view: bool,
                 find_unused_parameters: bool, static_graph: bool, timeline: Any) -> None:
        self._comm = comm
        self.rank, self.world, self.timeout = rank, world, timeout
        self.bucket_cap_mb = bucket_cap_mb
        self.overlap = overlap
        self.algorithm = algorithm
        self._builtin = builtin
        self.naive = naive
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.static_graph = static_graph
        self.timeline = timeline
        self.names = [n for n, _ in named]
        self.params = [p for _, p in named]
        self._device = self.params[0].device
        self._div = world  # torch's div_factor_: the world, or the ranks not yet joined
        self._scale = 1.0 / world  # torch: wrapped_scalar_tensor(double(1.) / div_factor_)
        self.shadow_count = 0
        n = len(self.params)
        # torch's reducer state for unused parameters (dynamic: find_unused and not static)
        self._dynamic_unused = find_unused_parameters and not static_graph
        self._track_used = find_unused_parameters or static_graph
        self._used = [False] * n          # local_used_map_ (this backward, or no_sync's since)
        self._used_dev = torch.zeros(n, dtype=torch.int32, device=self._device)  # its sum
        self._unused: list[int] = []      # unused_parameters_ of this forward
        self._missing: set[int] = set()   # buckets holding an unused parameter this backward
        self._expect = False              # expect_autograd_hooks_: a synced backward is due
        self._require_finalize = False    # require_finalize_: marked ready, not yet reduced
        self._iter = 0                    # synced forwards so far (the stamps' clock)
        self._stamp = [-1] * n            # the iteration each parameter was last marked ready
        self._unused_marked = False       # has_marked_unused_parameters_ (this iteration)
        self._static_calls = 0            # synced backwards seen with static_graph=True
        self._static_counts = [0] * n     # static graph: hooks fired in the first one
        self._static_unused: list[int] = []
        self._static_left = [0] * n       # static graph: hooks still due this backward
        self._static_multi = False        # static graph: some hook fired twice in the first
        self._global_used: list[bool] | None = None  # static graph: fixed by the first backward
        self._comm_hook: Callable[[Any, Any], Any] | None = None
        self._comm_state: Any = None
        self.sync = True
        self._rebuilt = False
        self._ready_order: list[int] = []
        self.allreduce_count = 0
        owner = {id(p): name.rsplit(".", 1)[0] if "." in name else "" for name, p in named}
        self._param_module = [owner[id(p)] for p in self.params]
        self._mod_counts: dict[str, int] = {}
        for m in self._param_module:
            self._mod_counts[m] = self._mod_counts.get(m, 0) + 1
        self._mod_left: dict[str, int] = {}
        self._mark = now_us()
        self._fast = False    # hooks take the short path (set by the first hook of a backward)
        self._queued = False  # the end-of-backward callback is queued for this backward
        self._traced = False  # a timeline records this iteration (decided in forward)
        self._set_buckets(unused_initial_buckets(self.params, bucket_cap_mb)
                          if self._dynamic_unused else initial_buckets(self.params, bucket_cap_mb))
        self._handles = [p.register_post_accumulate_grad_hook(partial(self._grad_ready, i))
                         for i, p in enumerate(self.params)]
        self.prepare_for_forward()

    # ---- buckets -----------------------------------------------------------------------------
    def _set_buckets(self, buckets: list[list[int]]) -> None:
        self._bucket_idx = buckets
        self.layouts = [BucketLayout(b, len(buckets), idx, self.params)
                        for b, idx in enumerate(buckets)]
        self._bucket_of = [0] * len(self.params)
        for b, idx in enumerate(buckets):
            for i in idx:
                self._bucket_of[i] = b
        self._sizes = [len(idx) for idx in buckets]
        self.buckets = [[self.names[i] for i in idx] for idx in buckets]
        if self.gradient_as_bucket_view:  # as torch's initialize_bucket_views on a rebuild
            with torch.no_grad():
                for lay in self.layouts:
                    for p, v in zip(lay.params, lay.views, strict=True):
                        if p.grad is not None and not _aliases(p.grad, v):
                            v.copy_(p.grad)
                            p.grad = v
        nb = len(buckets)
        self._pending = list(self._sizes)
        self._ready = [False] * nb
        self._works: list[Any] = [None] * nb
        self._next = 0

    def _reset_counters(self) -> None:
        """Bucket counters for the next backward (after each backward and in forward)."""
        self._pending[:] = self._sizes
        nb = len(self._sizes)
        self._ready[:] = [False] * nb
        self._works[:] = [None] * nb
        self._next = 0
        self._queued = False
        self._fast = False
        self._missing = set()

    def should_rebuild(self) -> bool:
        """torch's ``should_rebuild_buckets``: once, unless unused parameters are searched."""
        return not self._rebuilt and not self._dynamic_unused

    def rebuild_buckets(self) -> None:
        """The one rebuild of the buckets from the recorded gradient-ready order (a no-op
        before that order is known and after the rebuild); the assignment of group rank 0 is
        broadcast to all (torch's ``sync_bucket_indices``), so every rank reduces the same
        buckets whatever order its own gradients came in.

        Raises:
            RuntimeError: the recorded order does not hold every parameter exactly once (torch's
                internal assertion there; the hooks record each parameter once per iteration
                and an unfinished iteration records none, so this names a bug).
        """
        if not self.should_rebuild() or not self._ready_order:
            return
        n = len(self.params)
        if sorted(self._ready_order) != list(range(n)):
            times = Counter(self._ready_order)
            missing = [i for i in range(n) if i not in times]
            twice = sorted(i for i, k in times.items() if k > 1)
            parts = []
            if missing:
                parts.append("never became ready: " + ", ".join(self.names[i] for i in missing))
            if twice:
                parts.append("became ready more than once: "
                             + ", ".join(self.names[i] for i in twice))
            raise RuntimeError(
                f"rank {self.rank}: DDP cannot rebuild its buckets from the gradient-ready order "
                f"of the first synced iteration ({len(self._ready_order)} entries for {n} "
                f"parameters): parameter(s) that {'; that '.join(parts)}. That order holds each "
                "parameter once (a bug in distlab's DDP, which torch asserts against)")
        buckets = rebuilt_buckets(self.params, self._ready_order, self.bucket_cap_mb)
        buckets = self._sync_bucket_indices(buckets)
        self._set_buckets(buckets)
        self._rebuilt = True

    def _sync_bucket_indices(self, buckets: list[list[int]]) -> list[list[int]]:
        n = len(self.params)
        code = torch.empty(2 * n, dtype=torch.int64, device=self._device)
        code[:n] = torch.tensor([i for b in buckets for i in b], dtype=torch.int64)
        code[n:] = torch.tensor([k for k, b in enumerate(buckets) for _ in b], dtype=torch.int64)
        run_bounded(self.rank, "broadcast of the rebuilt bucket assignment", self.timeout,
                    dist.broadcast, code,
                    dist.get_global_rank(self._comm, 0) if self._comm is not None else 0,
                    self._comm)
        order, ids = code[:n].tolist(), code[n:].tolist()
        out: list[list[int]] = [[] for _ in range(max(ids) + 1)]
        for i, k in zip(order, ids, strict=True):
            out[k].append(i)
        return out

    def push_all_rebuilt_params(self) -> None:
        """Joined rank (torch's ``_push_all_rebuilt_params``): when a rebuild is still due and
        no ready order was recorded, offer every parameter, in parameter order."""
        if self.should_rebuild() and not self._ready_order:
            self._ready_order = list(range(len(self.params)))

    # ---- around forward ----------------------------------------------------------------------
    def check_finished(self) -> None:
        """Before a grad-enabled forward: raise torch's "Expected to have finished reduction in
        the prior iteration" error if the previous synced iteration marked parameters ready but
        never reduced them (some gradient never came), naming the parameters that got none on
        this rank; under ``static_graph`` the cause torch names there: the graph changed (a
        parameter used in the first iteration went unused). The buckets already launched are
        waited for first, and the reducer is reset, so the next forward goes on.

        Raises:
            RuntimeError: as above.
        """
        if not self._require_finalize:
            return
        missing = [i for i in range(len(self.params)) if self._stamp[i] != self._iter]
        for b in range(self._next):
            work = self._works[b]
            self._works[b] = None
            if work is not None:
                self._wait(work, self._describe_bucket(b))
        self._require_finalize = self._expect = False
        self._reset_counters()
        if self.should_rebuild():  # an unfinished first iteration records no order
            self._ready_order = []
        if not missing:  # every gradient came: the backward itself raised midway
            return
        names = ", ".join(self.names[i] for i in missing)
        if self.static_graph:
            raise RuntimeError(
                f"rank {self.rank}: DDP expected to have finished the reduction of the previous "
                f"backward before a new forward: parameter(s) {names} (indices {missing}) got no "
                "gradient on this rank, though they got one in the first iteration. The "
                "training graph has changed in this iteration (a parameter used in the first "
                "iteration went unused); this is not compatible with static_graph=True: pass "
                "find_unused_parameters=True without static_graph.")
        raise RuntimeError(
            f"rank {self.rank}: DDP expected to have finished the reduction of the previous "
            f"backward before a new forward: parameter(s) {names} (indices {missing}) got no "
            "gradient on this rank, so their buckets were never reduced. The module has "
            "parameters not used in producing the loss: pass find_unused_parameters=True (or "
            "static_graph=True if the unused set never changes), or make sure every forward "
            "output takes part in the loss.")

    def set_divide_factor(self, work: Any, divide_by_initial_world_size: bool) -> None:
        """Inside ``Join``: divide by the initial world size, or (``divide_by_initial_world_size
        =False``) by the ranks not yet joined: the sum of the "not joined" allreduce ``work``
        (torch's ``_set_forward_pass_work_handle``; ``work`` is ``None`` for all joinables but
        the first)."""
        div = self.world
        if work is not None and not divide_by_initial_world_size:
            work.wait()
            div = int(round(float(work.result()[0].item())))
        if div != self._div:
            self._div, self._scale = div, 1.0 / div

    def prepare_for_forward(self) -> None:
        """Reset the bucket counters for the coming backward (unless a reduction is still
        under way: a forward without grad between two backwards of one iteration); decide
        whether a timeline records this iteration."""
        if not self._require_finalize:
            self._reset_counters()
        self._traced = self.timeline is not None
        if self._traced:
            self._mod_left = dict(self._mod_counts)
            self._mark = now_us()

    def prepare_for_backward(self, output: Any, synced: bool) -> None:
        """After the module's forward returned ``output``: the parameters this synced backward
        will not reach (torch's ``prepare_for_backward``: searched in ``output``'s graph with
        ``find_unused_parameters``, the recorded ones with ``static_graph``), and the start of
        the backward spans (loss computation included). A synced forward is a new iteration:
        the hooks of the coming backward reduce (torch's ``expect_autograd_hooks_``), each
        parameter may be marked ready once; an unsynced one (``no_sync``, no grad) changes
        nothing, as torch does not call its reducer then."""
        if synced:
            self._expect = True
            self._iter += 1
            self._unused_marked = False
            self._unused = []
            if self._dynamic_unused:
                reached = reached_parameters(output)
                self._unused = [i for i, p in enumerate(self.params) if id(p) not in reached]
            elif self.static_graph and self._static_calls >= 1:
                self._unused = self._static_unused
                self._static_left[:] = self._static_counts
        if self._traced:
            self._mark = now_us()

    def sink_output(self, output: Any, synced: bool) -> Any:
        """``output`` as the wrapper returns it: under ``static_graph``, in a synced forward
        before the first synced backward, its tensors that have a ``grad_fn`` pass through
        :class:`_FirstBackwardSink` (torch's ``_DDPSink``), whose backward queues that
        backward's reduction; otherwise ``output`` itself."""
        if not (synced and self.static_graph and self._static_calls == 0):
            return output
        leaves, spec = pytree.tree_flatten(output)
        at = [k for k, t in enumerate(leaves)
              if isinstance(t, torch.Tensor) and t.grad_fn is not None]
        if not at:
            return output
        outs = _FirstBackwardSink.apply(weakref.ref(self), *[leaves[k] for k in at])
        for k, t in zip(at, outs, strict=True):
            leaves[k] = t
        return pytree.tree_unflatten(leaves, spec)

    def queue_static_first(self) -> None:
        """From :class:`_FirstBackwardSink`'s backward: queue the first synced backward's
        reduction (once, however many outputs or forwards fed this backward)."""
        if self._expect and not self._queued and self._static_calls == 0:
            self._queued = True
            _queue_callback(self._finish_static_first)

    def register_comm_hook(self, state: Any, hook: Callable[[Any, Any], Any]) -> None:
        """Let ``hook(state, bucket)`` reduce every bucket (torch's contract; see
        :mod:`distlab.ddp.comm_hooks`).

        Raises:
            TypeError: ``hook`` is not callable with two arguments.
            ValueError: ``naive=True`` (no buckets) or ``algorithm`` is not ``"builtin"``.
            RuntimeError: a hook is already registered.
        """
        hook = check_comm_hook(hook)
        if self.naive:
            raise ValueError("register_comm_hook: naive=True reduces each parameter on its own, "
                             "without buckets; a comm hook needs naive=False")
        if not self._builtin:
            raise ValueError(f"register_comm_hook: the hook replaces the allreduce, so algorithm "
                             f"must be 'builtin', got {self.algorithm!r}")
        if self._comm_hook is not None:
            raise RuntimeError("register_comm_hook can only be called once per DDP")
        self._comm_hook, self._comm_state = hook, state

    # ---- hooks -------------------------------------------------------------------------------
    def lane(self, what: str) -> str:
        """The timeline lane ``rank{r}/{what}``."""
        return f"rank{self.rank}/{what}"

    def _grad_ready(self, i: int, _param: torch.Tensor) -> None:
        """Post-accumulate-grad hook of parameter ``i`` (torch's ``autograd_hook``). Only
        between a synced forward and the end of the backward that reduced it does a hook count
        (``_expect``): a second backward of the same iteration (``retain_graph=True``)
        accumulates locally, unsynced, as torch's. The short path (taken from the second hook of
        a synced backward on, when no timeline records and the buckets are rebuilt) is one
        stamp and one list decrement."""
        if self._fast:
            if self._stamp[i] == self._iter:
                self._marked_twice(i)
            self._stamp[i] = self._iter
            b = self._bucket_of[i]
            left = self._pending[b] - 1
            self._pending[b] = left
            if left == 0:
                self._bucket_ready(b)
            return
        if self._track_used and (self._dynamic_unused or self._static_calls == 0):
            self._used[i] = True  # torch's local_used_map_ (no_sync backwards included)
        if not self._expect:
            return
        if self.static_graph and self._static_calls == 0:  # first backward: count only
            self._static_counts[i] += 1
            return
        if not self._queued:
            self._queued = True
            self._require_finalize = True
            _queue_callback(self._finish)
            if self._unused and not self._unused_marked:
                self._unused_marked = True
                self._mark_unused_ready()
            self._fast = (self._rebuilt and not self.naive and not self._traced
                          and not self._static_multi)
        if self.static_graph:  # after the first backward: ready once its hooks there all fired
            left = self._static_left[i]
            if left == 0:
                self._graph_changed(i)
            self._static_left[i] = left - 1
            if left > 1:
                return
        self._mark_ready(i)

    def _mark_ready(self, i: int) -> None:
        """torch's ``mark_variable_ready`` for a gradient that came: once per iteration, in the
        rebuild order the first time (before the rebuild), then counted in its bucket."""
        if self._stamp[i] == self._iter:
            self._marked_twice(i)
        self._stamp[i] = self._iter
        if self.should_rebuild():
            self._ready_order.append(i)
        if self._traced:
            self._module_done(i)
        if self.naive:
            return
        b = self._bucket_of[i]
        self._pending[b] -= 1
        if self._pending[b] == 0:
            self._bucket_ready(b)

    def _mark_unused_ready(self) -> None:
        """torch's first-hook marking of the parameters the forward did not reach: their
        buckets count them as arrived (filled with zeros or their gradient, ``_fill_each``)."""
        for j in self._unused:
            self._stamp[j] = self._iter
            b = self._bucket_of[j]
            self._missing.add(b)
            self._pending[b] -= 1
            if self._pending[b] == 0:
                self._bucket_ready(b)

    def _marked_twice(self, i: int) -> None:
        """Raise torch's "Expected to mark a variable ready only once" for parameter ``i``
        (under ``static_graph``: the graph changed, torch's error there)."""
        if self.static_graph and self._static_calls >= 1:
            self._graph_changed(i)
        unused = i in self._unused
        reasons = (
            "1) use of a module parameter outside the forward function: make sure model "
            "parameters are not shared across multiple concurrent forward-backward passes, or "
            "try static_graph=True if the module graph does not change during training; 2) "
            "parameters reused in multiple reentrant backward passes (several reentrant "
            "`checkpoint` calls wrapping the same part of the model mark the same parameters "
            "ready several times): DDP does not support this by default; static_graph=True "
            "works if the module graph does not change over iterations")
        if unused:
            reasons += (
                "; 3) incorrect unused parameter detection: the forward's output did not reach "
                "this parameter, so DDP marked it ready as unused, and its gradient came later "
                "(e.g. in a reentrant backward under `checkpoint`). If every parameter takes "
                "part in backward, pass find_unused_parameters=False; if the unused set never "
                "changes, try static_graph=True")
        how = ("marked ready as unused, then its gradient hook fired" if unused
               else "its gradient hook fired twice")
        raise RuntimeError(
            f"rank {self.rank}: DDP expected to mark a variable ready only once: parameter "
            f"{self.names[i]} (index {i}) has been marked as ready twice in this iteration "
            f"({how}). This error is caused by one of the following reasons: {reasons}.")

    def _graph_changed(self, i: int) -> None:
        """Raise torch's static-graph error: parameter ``i``'s hook fired more often in this
        backward than in the first one (unused there, used now)."""
        first = self._static_counts[i]
        raise RuntimeError(
            f"rank {self.rank}: DDP's training graph has changed in this iteration: parameter "
            f"{self.names[i]} (index {i}) got a gradient more often in this backward than in the "
            f"first iteration's ({first} time(s){', unused there' if first == 0 else ''}); this "
            "is not compatible with static_graph=True: pass find_unused_parameters=True "
            "without static_graph.")

    def _bucket_ready(self, b: int) -> None:
        self._fill(b)
        self._ready[b] = True
        if self._traced:
            self.timeline.record(f"bucket {b} ready", "ready", self.lane("backward"), now_us(),
                                 0.0)
        if self.overlap:
            nb = len(self.layouts)
            while self._next < nb and self._ready[self._next]:
                self._launch(self._next)
                self._next += 1

    def _module_done(self, i: int) -> None:
        """Timeline: close the span of the leaf module whose last parameter became ready."""
        mod = self._param_module[i]
        self._mod_left[mod] -= 1
        if self._mod_left[mod] == 0:
            t = now_us()
            self.timeline.record(f"backward {mod}", "backward", self.lane("backward"),
                                 self._mark, t - self._mark)
            self._mark = t

    def remove_hooks(self) -> None:
        """Detach the gradient hooks from the parameters."""
        for h in self._handles:
            h.remove()
        self._handles = []

    # ---- filling a bucket --------------------------------------------------------------------
    def _fill(self, b: int) -> None:
        """Bring bucket ``b``'s gradients into its flat buffer, scaled by 1/world unless a hook
        is registered (see the module docstring for the ops)."""
        if self._missing and b in self._missing:
            self._fill_each(b)
            return
        lay = self.layouts[b]
        if self.gradient_as_bucket_view:
            grads = [p.grad for p in lay.params]
            if all(g is v for g, v in zip(grads, lay.views, strict=True)):
                if self._comm_hook is None:
                    lay.flat.div_(self._div)  # torch: bucket_view.div_(div_factor_) per view
                return
            if any(g is None or _aliases(g, v) for g, v in zip(grads, lay.views, strict=True)):
                self._fill_each(b)
                return
            self._copy_in(lay)
            for p, v in zip(lay.params, lay.views, strict=True):
                p.grad = v
            return
        self._copy_in(lay)

    def _copy_in(self, lay: BucketLayout) -> None:
        """Copy every (non-aliasing) gradient of ``lay`` into its view, times 1/world without a
        hook: small ones with one foreach copy and a ``mul_`` per run, large ones in one pass."""
        if self._comm_hook is not None:
            torch._foreach_copy_(lay.views, [p.grad for p in lay.params])
            return
        s = self._scale
        if lay.small_params:
            torch._foreach_copy_(lay.small_views, [p.grad for p in lay.small_params])
            for run in lay.small_runs:
                run.mul_(s)
        for p, v in zip(lay.big_params, lay.big_views, strict=True):
            torch.mul(p.grad, s, out=v)

    def _fill_each(self, b: int) -> None:
        """Per-parameter fill (torch's ``mark_variable_ready_dense`` rule for each one): for a
        missing gradient (zeros), a gradient already in its bucket view, or a mix."""
        lay = self.layouts[b]
        hook = self._comm_hook is not None
        with torch.no_grad():
            for p, v in zip(lay.params, lay.views, strict=True):
                g = p.grad
                if g is None:
                    v.zero_()
                    if not self._track_used:  # else the copy-out decides (global use)
                        p.grad = v if self.gradient_as_bucket_view else torch.zeros_like(p)
                elif _aliases(g, v):
                    if not hook:
                        v.div_(self._div)
                else:
                    if hook:
                        v.copy_(g)
                    else:
                        torch.mul(g, self._scale, out=v)
                    if self.gradient_as_bucket_view:
                        p.grad = v

    # ---- launching and finishing -------------------------------------------------------------
    def _launch(self, b: int) -> None:
        self.allreduce_count += 1
        lay = self.layouts[b]
        buf = lay.flat
        if self._comm_hook is not None:
            gb = lay.grad_bucket
            gb._buffer = buf  # a hook may have replaced it (set_buffer) last time
            if self._traced:
                t0 = now_us()
            fut = self._comm_hook(self._comm_state, gb)
            if not isinstance(fut, torch._C.Future):  # torch.futures.Future or get_future()
                raise TypeError(f"comm hook must return a torch.futures.Future, got "
                                f"{type(fut).__name__}")
            self._works[b] = fut
            if self._traced:
                self._works[b] = self._trace_future(fut, f"allreduce bucket {b}", t0, buf)
        elif self._builtin:
            if self._traced:
                t0 = now_us()
            work = dist.all_reduce(buf, group=self._comm, async_op=True)
            self._works[b] = work
            if self._traced:
                self._works[b] = self._trace_future(work.get_future(), f"allreduce bucket {b}",
                                                    t0, buf)
        else:
            t0 = now_us()
            self._reduce_sync(buf, self._describe_bucket(b))
            if self._traced:
                self.timeline.record(f"allreduce bucket {b}", "allreduce", self.lane("allreduce"),
                                     t0, now_us() - t0, {"bytes": lay.nbytes})

    def _trace_future(self, fut: torch.futures.Future, label: str, t0: float,
                      buf: torch.Tensor) -> torch.futures.Future:
        """The future to wait on in place of ``fut``: it completes with ``fut``'s value once the
        span (``t0`` to completion, microseconds) is on the timeline. Waiting on ``fut`` itself
        could return before its callback ran, and the step would end without the span."""
        tl, lane, nbytes = self.timeline, self.lane("allreduce"), buf.numel() * buf.element_size()

        def record(done: torch.futures.Future) -> Any:
            tl.record(label, "allreduce", lane, t0, now_us() - t0, {"bytes": nbytes})
            return done.value()

        return fut.then(record)

    def _finish(self) -> None:
        """End of a synced backward (torch's ``finalize_backward``): launch what is left, wait,
        copy the sums out. With a bucket still waiting for a gradient (no unused parameters
        searched, or ``static_graph`` after its first backward) nothing is finalized: as in
        torch, whose finalizer runs once every bucket is ready, a later backward of the same
        iteration may bring the rest; otherwise the next forward raises
        (:meth:`check_finished`)."""
        nb = len(self.layouts)
        unready: list[int] = []
        if not self.naive:
            unready = [b for b in range(nb) if not self._ready[b]]
            if unready and (not self._track_used or self._static_calls >= 1):
                self._queued = self._fast = False
                return
        self._expect = self._require_finalize = False
        try:
            if self.naive:
                self._finish_naive()
                return
            for b in unready:  # a parameter the graph reached whose gradient never came
                self._fill_each(b)
                self._ready[b] = True
            while self._next < nb:
                self._launch(self._next)
                self._next += 1
            used_work = None
            if self._dynamic_unused:  # torch's all_reduce_local_used_map, after the last bucket
                self._used_dev.copy_(torch.tensor(self._used, dtype=torch.int32))
                used_work = dist.all_reduce(self._used_dev, group=self._comm, async_op=True)
            self._wait_and_copy_out(used_work)
            if self.static_graph and self.should_rebuild() and self._ready_order:
                self._ready_order += self._static_unused  # torch pushes them last
        finally:
            if self._dynamic_unused:
                self._used = [False] * len(self.params)
            self._reset_counters()

    def _wait_and_copy_out(self, used_work: Any) -> None:
        """Wait for every bucket (and the used-parameter map), copy the sums into ``.grad``."""
        global_used = self._global_used
        if used_work is not None:
            self._wait(used_work, "allreduce of the used-parameter map")
            global_used = (self._used_dev != 0).tolist()
        hook = self._comm_hook is not None
        for b, lay in enumerate(self.layouts):
            work = self._works[b]
            self._works[b] = None
            result = lay.flat
            if work is not None:
                if hook:
                    result = lay.check_result(self._wait(work, self._describe_bucket(b)))
                else:
                    self._wait(work, self._describe_bucket(b))
            if global_used is None or (
                    all(global_used[i] for i in self._bucket_idx[b])
                    and all(p.grad is not None for p in lay.params)):
                self._copy_out(lay, result)
            else:
                self._copy_out_used(b, result, global_used)

    def _copy_out_used(self, b: int, result: torch.Tensor, global_used: list[bool]) -> None:
        """torch's ``finalize_bucket_dense`` with unused parameters: a parameter no rank used
        keeps its ``.grad`` untouched; one used elsewhere gets the sum (created if ``None``)."""
        lay = self.layouts[b]
        if self.gradient_as_bucket_view and result is not lay.flat:
            lay.flat.copy_(result)
        views = lay.views if (result is lay.flat or self.gradient_as_bucket_view) \
            else lay.views_of(result)
        with torch.no_grad():
            for i, p, v in zip(self._bucket_idx[b], lay.params, views, strict=True):
                if not global_used[i]:
                    continue
                if self.gradient_as_bucket_view:
                    if p.grad is None:
                        p.grad = v
                elif p.grad is None:
                    p.grad = torch.empty_like(p).copy_(v)
                else:
                    p.grad.copy_(v)

    def _finish_static_first(self) -> None:
        """``static_graph=True``, end of the first synced backward (torch's
        ``delay_all_reduce``): the used-parameter map, then every bucket filled and reduced;
        the parameters whose hook never fired are the unused ones from now on."""
        self._expect = False
        try:
            self._static_calls = 1
            n = len(self.params)
            self._static_unused = [i for i in range(n) if self._static_counts[i] == 0]
            self._static_multi = any(c > 1 for c in self._static_counts)
            self._used_dev.copy_(torch.tensor(self._used, dtype=torch.int32))
            work = dist.all_reduce(self._used_dev, group=self._comm, async_op=True)
            nb = len(self.layouts)
            for b in range(nb):
                self._fill_each(b)
                self._ready[b] = True
            for b in range(nb):
                self._launch(b)
            self._next = nb
            self._wait_and_copy_out(work)
            self._global_used = (self._used_dev != 0).tolist()
        finally:
            self._reset_counters()

    def _copy_out(self, lay: BucketLayout, result: torch.Tensor) -> None:
        """Reduced bucket -> ``.grad``: one foreach copy, or (bucket views) nothing unless a hook
        returned another tensor."""
        same = result is lay.flat
        if self.gradient_as_bucket_view:
            if not same:
                lay.flat.copy_(result)
            return
        views = lay.views if same else lay.views_of(result)
        torch._foreach_copy_([p.grad for p in lay.params], views)

    def _finish_naive(self) -> None:
        order = reversed(range(len(self.params)))  # roughly the ready order of a sequential model
        for i in order:
            p = self.params[i]
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            p.grad.mul_(self._scale)
            self.allreduce_count += 1
            t0 = now_us()
            self._reduce_sync(p.grad, f"allreduce of {self.names[i]}")
            if self._traced:
                self.timeline.record(f"allreduce {self.names[i]}", "allreduce",
                                     self.lane("allreduce"), t0, now_us() - t0,
                                     {"bytes": p.grad.numel() * p.grad.element_size()})

    # ---- a joined rank (distlab.ddp.join) ----------------------------------------------------
    def shadow_backward(self) -> None:
        """Joined rank: zeros into every gradient collective the others run, in their order."""
        if self.naive:
            for i in reversed(range(len(self.params))):
                zeros = torch.zeros_like(self.params[i])
                self.shadow_count += 1
                self._reduce_sync(zeros, f"shadow allreduce of {self.names[i]}")
            return
        works: list[tuple[int, float, Any]] = []
        for b, lay in enumerate(self.layouts):
            zeros = torch.zeros_like(lay.flat)
            self.shadow_count += 1
            t0 = now_us()
            if self._comm_hook is not None:
                gb = lay.grad_bucket
                gb._buffer = zeros
                works.append((b, t0, self._comm_hook(self._comm_state, gb)))
                gb._buffer = lay.flat
            elif self._builtin:
                works.append((b, t0, dist.all_reduce(zeros, group=self._comm, async_op=True)))
            else:
                self._reduce_sync(zeros, f"shadow allreduce of bucket {b}")
                works.append((b, t0, None))
        for b, t0, w in works:  # spans from launch to completion, as the live buckets'
            if w is not None:
                self._wait(w, f"shadow allreduce of bucket {b}")
            if self.timeline is not None:
                self.timeline.record(f"shadow allreduce bucket {b}", "shadow",
                                     self.lane("allreduce"), t0, now_us() - t0,
                                     {"bytes": self.layouts[b].nbytes})

    def shadow_used_map(self) -> None:
        """Joined rank: its used-parameter map (the last sum it saw) into the others' map
        allreduce, summed in place as torch's ``_match_unused_params_allreduce``."""
        run_bounded(self.rank, "shadow allreduce of the used-parameter map", self.timeout,
                    dist.all_reduce, self._used_dev, dist.ReduceOp.SUM, self._comm)

    # ---- bounded waits ---------------------------------------------------------------------
    def _wait(self, work: Any, what: str) -> Any:
        """``work.wait()``; a failure (the bounded group's timeout, a peer gone) becomes
        :class:`~distlab.uneven.UnevenInputsError` naming ``what``."""
        return run_bounded(self.rank, what, self.timeout, work.wait)

    def _reduce_sync(self, t: torch.Tensor, what: str) -> None:
        """A blocking sum of ``t`` over the bounded group (built-in or distlab's algorithm,
        whose waits take the group's timeout)."""
        if self._builtin:
            run_bounded(self.rank, what, self.timeout, dist.all_reduce, t, dist.ReduceOp.SUM,
                        self._comm)
        else:
            run_bounded(self.rank, what, self.timeout, all_reduce, t, "sum", self.algorithm,
                        self._comm)

    def _describe_bucket(self, b: int) -> str:
        lay = self.layouts[b]
        return f"allreduce of bucket {b} ({len(lay.params)} parameters, {lay.nbytes:,} bytes)"
