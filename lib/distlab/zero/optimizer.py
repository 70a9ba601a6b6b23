"""ZeRO stages 0 to 3 on real ranks: data parallel training, the optimizer's state sharded.

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

Stages 0-2 run on :class:`distlab.zero.bucketed.Bucketed`, stage 3 on
:class:`distlab.zero.stage3.Stage3`; ``ZeroDataParallel`` is the one interface over both, and
calls them only through their protocols, :class:`~distlab.zero.engine.ZeroEngine` and (stages
0-2: buckets, Join) :class:`~distlab.zero.engine.BucketEngine`.

Layout (:mod:`distlab.zero.partition`): each bucket is a flat parameter buffer that the
parameters are views of, padded to a multiple of ``N`` and cut into ``N`` equal shards. The
optimizer (``torch.optim.Adam`` by default, or ``optimizer=`` any ``torch.optim`` class and its
``optimizer_kwargs``, or a factory: :mod:`distlab.zero.optim`; an elementwise one does the same
arithmetic on shards) steps one tensor per bucket: the shard itself when the parameters are
fp32, or an fp32 master copy of it, made from the fp32 initial weights, when ``param_dtype`` is
16-bit (mixed precision: the shard is copied back, rounded, after the step). Gradients are
scaled by ``1/N`` before they are summed, as torch's DDP does, so fp32 results equal DDP with
the same optimizer bitwise wherever the sum order is the same (always on two ranks).

Collectives: distlab's own plans by default (:func:`distlab.collectives.reduce_scatter`,
:func:`~distlab.collectives.all_gather`, :func:`~distlab.collectives.all_reduce`, any of their
algorithms), or torch's built-ins with ``algorithm="builtin"``. With a ``timeline`` set, a step
records ``backward`` and ``bucket b ready`` on lane ``rank{r}/backward``, each collective on
``rank{r}/reduce_scatter`` (``rank{r}/allreduce`` for stage 0) and ``rank{r}/all_gather``, and
the optimizer on ``rank{r}/step``. Gradient accumulation at stages 0-2: every backward but the
last under :meth:`~ZeroDataParallel.no_sync` (autograd sums into the gradients, nothing is
reduced; at stage 2 the full ``.grad`` s are kept until then, as FSDP2 keeps unsharded gradients
with sync off), then one backward with sync on reduces each bucket once, or
:meth:`~ZeroDataParallel.finish_gradient_sync` does at once; a second backward after a bucket
was reduced is a ``RuntimeError``. Not supported at stages 0-2: parameters that get no gradient,
and gradient accumulation inside Join (a joined rank shadows one backward per forward).

Stage 3 (parameters sharded too) runs per *unit* rather than per bucket, each unit gathered just
ahead of its forward and backward and freed after, with ``prefetch`` units gathered ahead, as
torch FSDP2 runs: any optimizer, gradient accumulation (:meth:`set_requires_gradient_sync`,
:meth:`no_sync`), parameters unused in a step, ``param_dtype``/``reduce_dtype`` as FSDP2's
``MixedPrecisionPolicy``; :mod:`distlab.zero.stage3` says how. :meth:`ZeroDataParallel.state_dict`
gives the module's full state dict (parameters, buffers, tied aliases) at every stage and
:meth:`~ZeroDataParallel.load_state_dict` loads one from any world size;
:meth:`~ZeroDataParallel.full_state_dict` the full parameters only.

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

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms.join import Join, Joinable, JoinHook

from distlab._checks import check_bool, check_float, check_instance, check_int
from distlab.timeline import Timeline
from distlab.uneven import (
    DEFAULT_TIMEOUT_S,
    bounded_group,
    broadcast_from,
    check_timeout,
    last_joiner_rank,
)
from distlab.zero.bucketed import Bucketed
from distlab.zero.engine import BucketEngine, ZeroEngine
from distlab.zero.memory_model import check_stage
from distlab.zero.optim import OptimizerSpec, build_optimizer
from distlab.zero.partition import Bucket
from distlab.zero.stage3 import Stage3

__all__ = ["ZeroDataParallel"]


class ZeroJoinHook(JoinHook):
    """What a joined rank does per iteration of the others (see the module docstring).
    ``iterations``: iterations shadowed so far."""

    def __init__(self, zdp: ZeroDataParallel, divide_by_initial_world_size: bool = True) -> None:
        super().__init__()
        self.zdp = zdp
        self.engine = zdp._join_engine()
        zdp._divide_by_initial_world_size = bool(divide_by_initial_world_size)
        self.iterations = 0

    def main_hook(self) -> None:
        self.iterations += 1
        self.engine.shadow_iteration()

    def post_hook(self, is_last_joiner: bool) -> None:
        zdp = self.zdp
        src = last_joiner_rank(zdp.rank, is_last_joiner, zdp._comm, zdp.join_device)
        broadcast_from(self.engine.flats, src, zdp._comm)
        zdp.last_joiner = src


class ZeroDataParallel(Joinable):
    """Data-parallel training of ``module``, ZeRO ``stage`` 0 to 3, Adam or any optimizer.

    Args:
        module: the model; its trainable parameters become views into flat bucket buffers
            (cast to ``param_dtype``) and are broadcast from rank 0.
        stage: 0 (plain DDP), 1 (optimizer state sharded), 2 (+ gradients sharded) or 3
            (+ parameters sharded, :mod:`distlab.zero.stage3`).
        lr, betas, eps, weight_decay: ``torch.optim.Adam``'s (default 1e-3, (0.9, 0.999),
            1e-8, 0.0), when ``optimizer`` is not given.
        optimizer: a ``torch.optim.Optimizer`` subclass or a factory ``params -> Optimizer``
            that steps this rank's shards (:mod:`distlab.zero.optim`); ``None``: Adam.
        optimizer_kwargs: the optimizer class's keyword arguments (``lr`` included).
        param_dtype: stages 0-2: dtype of parameters and gradients (default: the module's); a
            16-bit dtype gives mixed precision with fp32 master weights (from the fp32 initial
            weights) and moments. Stage 3: FSDP2's ``MixedPrecisionPolicy.param_dtype``: the
            shards stay in the parameters' own dtype and the optimizer steps them; gathered
            units, the compute, floating-point forward inputs and full gradients use
            ``param_dtype``.
        reduce_dtype: stage 3: FSDP2's ``MixedPrecisionPolicy.reduce_dtype``, the dtype
            gradients are reduce-scattered (and accumulated with sync off) in (default:
            ``param_dtype``).
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
        ValueError: a bad stage, ``bucket_cap_mb <= 0``, ``prefetch < 0``, ``units`` or
            ``reduce_dtype`` with another stage, units not submodules, a module without
            trainable parameters, Adam's arguments beside ``optimizer``.
        TypeError: a dtype that is not a ``torch.dtype``, an ``optimizer`` that is neither an
            optimizer class nor a factory.
    """

    def __init__(self, module: torch.nn.Module, stage: int, *, lr: float | None = None,
                 betas: tuple[float, float] | None = None, eps: float | None = None,
                 weight_decay: float | None = None, optimizer: OptimizerSpec | None = None,
                 optimizer_kwargs: dict[str, Any] | None = None,
                 param_dtype: torch.dtype | None = None,
                 reduce_dtype: torch.dtype | None = None, bucket_cap_mb: float = 25.0,
                 algorithm: str | None = None,
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
        if reduce_dtype is not None and self.stage != 3:
            raise ValueError(f"reduce_dtype= is for stage 3 (FSDP2's mixed precision); stage "
                             f"{self.stage} reduces in param_dtype")
        for name, dt in (("param_dtype", param_dtype), ("reduce_dtype", reduce_dtype)):
            if dt is not None and not (isinstance(dt, torch.dtype) and dt.is_floating_point):
                raise TypeError(f"{name} must be a floating-point torch.dtype, got {dt!r}")
        self.module, self.group, self.algorithm, self.timeline = module, group, algorithm, timeline
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        self.params = [p for p in module.parameters() if p.requires_grad]
        if not self.params:
            raise ValueError("module has no trainable parameters")
        self.dtype = param_dtype or self.params[0].dtype
        self._comm = bounded_group(group, self.timeout)
        adam = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay}

        def make(ps: list[torch.Tensor]) -> torch.optim.Optimizer:
            return build_optimizer(ps, optimizer, optimizer_kwargs, adam)
        self.engine: ZeroEngine
        self._buckets: BucketEngine | None = None  # the engine again at stages 0-2
        self._stage3: Stage3 | None = None  # the engine again at stage 3 (its units)
        if self.stage == 3:
            self.engine = self._stage3 = Stage3(
                module, rank=self.rank, world=self.world, group=group, comm=self._comm,
                param_dtype=param_dtype, reduce_dtype=reduce_dtype, algorithm=algorithm,
                make_optimizer=make, timeline_of=lambda: self.timeline, timeout=self.timeout,
                prefetch=self.prefetch, units=units)
        else:
            self.engine = self._buckets = Bucketed(
                self.params, stage=self.stage, rank=self.rank, world=self.world, group=group,
                comm=self._comm, dtype=self.dtype, cap_mb=cap, algorithm=algorithm,
                make_optimizer=make, timeline_of=lambda: self.timeline, timeout=self.timeout)
        self.optimizer = self.engine.optimizer
        self.last_joiner: int | None = None
        self._divide_by_initial_world_size = True  # set by the join hook

    def _join_engine(self) -> BucketEngine:
        """The engine, which at stages 0-2 offers the Join protocol.

        Raises:
            ValueError: stage 3.
        """
        if self._buckets is None:
            raise ValueError("Join is not supported at stage 3 (use stage 0, 1 or 2 with Join)")
        return self._buckets

    @property
    def flats(self) -> list[torch.Tensor]:
        """Stages 0-2: the flat parameter buffer of each bucket (stage 3: none)."""
        return self._buckets.flats if self._buckets is not None else []

    @property
    def masters(self) -> list[torch.nn.Parameter]:
        """Stages 0-2: what the optimizer steps per bucket (stage 3: none)."""
        return self._buckets.masters if self._buckets is not None else []

    @property
    def buckets(self) -> list[Bucket]:
        """Stages 0-2: the bucket layouts (stage 3: none)."""
        return self._buckets.buckets if self._buckets is not None else []

    # ---- forward ---------------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """``module(*args, **kwargs)``; stages 0-2 with a timeline: marks where its backward
        starts (and inside Join, the scale of this iteration's gradients)."""
        if self._join_config.enable:  # only at stages 0-2: join_hook refuses stage 3
            work = Join.notify_join_context(self)  # "not joined yet" (first joinable only)
            self._join_engine().set_divide_factor(work, self._divide_by_initial_world_size)
        out = self.module(*args, **kwargs)
        self.engine.after_forward(out)
        return out

    # ---- step ------------------------------------------------------------------------------

    def step(self) -> None:
        """The optimizer on this rank's shards (stages 1-3; all of it at stage 0), then at
        stages 1-2 the all-gather of the parameters.

        Raises:
            RuntimeError: stages 0-2: some bucket's gradients were not all produced since the
                last step; stage 3: gradients accumulated with sync off never reduced.
        """
        self.engine.step()

    # ---- Join ------------------------------------------------------------------------------

    def join_hook(self, **kwargs: Any) -> ZeroJoinHook:
        """torch's Join protocol (``divide_by_initial_world_size``, default ``True``).

        Raises:
            ValueError: stage 3.
        """
        self._join_engine()
        return ZeroJoinHook(self, kwargs.get("divide_by_initial_world_size", True))

    @property
    def join_device(self) -> torch.device:
        return self.params[0].device

    @property
    def join_process_group(self) -> Any:
        return self.group if self.group is not None else dist.group.WORLD  # Join composes

    # ---- what this rank holds --------------------------------------------------------------

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The module's full parameters, ``name -> tensor`` (copies, the module's own names and
        order, frozen parameters included), on every rank at every stage. At stage 3 every rank
        must call it (each unit is all-gathered)."""
        full = self.engine.full_parameters()
        return {name: full[id(p)] if id(p) in full else p.detach().clone()
                for name, p in self.module.named_parameters()}

    def state_dict(self) -> dict[str, torch.Tensor]:
        """``module.state_dict()`` with full tensors: every key the plain module has (its
        parameters, persistent buffers, and each alias of a tied parameter), as copies. At
        stage 3 every rank must call it; the parameters come in their own dtype (fp32 from
        fp32 weights under ``param_dtype``), as FSDP2's full state dict; at stages 0-2 as the
        flat buffers hold them (``param_dtype``). The optimizer's state is not in it."""
        full = self.engine.full_parameters()
        return {name: full[id(t)] if id(t) in full else t.detach().clone()
                for name, t in self.module.state_dict(keep_vars=True).items()}

    def load_state_dict(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        """Load full tensors (a :meth:`state_dict` of any world size, or a plain module's)
        into this rank's parameters, shards and buffers; every key of ``module.state_dict()``
        must be there and no other. Values are cast to what holds them (the shards' dtype at
        stage 3; 16-bit parameters at stages 0-2 get fp32 masters from the given values). The
        optimizer's state is kept. No collective runs.

        Raises:
            TypeError: ``state_dict`` not a mapping.
            ValueError: missing or unexpected keys, or a value of another shape.
        """
        check_instance("state_dict", state_dict, Mapping)
        mine = self.module.state_dict(keep_vars=True)
        missing = [k for k in mine if k not in state_dict]
        extra = [k for k in state_dict if k not in mine]
        if missing or extra:
            raise ValueError(f"state_dict: missing keys {missing}, unexpected keys {extra}")
        for k, t in mine.items():
            if tuple(state_dict[k].shape) != tuple(t.shape):
                raise ValueError(f"state_dict[{k!r}]: shape {tuple(state_dict[k].shape)}, the "
                                 f"module's is {tuple(t.shape)}")
        sharded = self.engine.sharded_ids()
        values: dict[int, torch.Tensor] = {}
        with torch.no_grad():
            for k, t in mine.items():
                v = state_dict[k].detach()
                if id(t) in sharded:
                    values[id(t)] = v
                else:
                    t.copy_(v)
                    values[id(t)] = v
        self.engine.load_parameters(values)

    # ---- gradient accumulation -------------------------------------------------------------

    def set_requires_gradient_sync(self, requires_gradient_sync: bool) -> None:
        """FSDP2's switch: ``False`` keeps each backward's gradients unreduced and sums the
        next ones into them (stage 3: in full buffers, summed in ``reduce_dtype``; stages 0-2:
        in ``.grad``); the next backward with ``True``, or :meth:`finish_gradient_sync`,
        reduces the sum. At stage 3 several backwards with ``True`` each reduce-scatter, and
        the gradient shards add up; at stages 0-2 a bucket is reduced once per step. Run the
        last backward before :meth:`step` with ``True``, or call :meth:`finish_gradient_sync`.

        Raises:
            TypeError: not a bool.
        """
        self.engine.sync = check_bool("requires_gradient_sync", requires_gradient_sync)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """``with zdp.no_sync(): ...backward()``: :meth:`set_requires_gradient_sync` ``False``
        inside, the previous setting after."""
        engine = self.engine
        before = engine.sync
        engine.sync = False
        try:
            yield
        finally:
            engine.sync = before

    def finish_gradient_sync(self) -> None:
        """Reduce now what backwards with sync off accumulated and no backward with sync on
        reduced (stages 0-2: each bucket whose gradients are all there; stage 3: each unit's,
        reduce-scattered), so :meth:`step` can follow a step's backwards that all ran under
        :meth:`no_sync` (a pipeline stage's microbatches). A collective: every rank of the group
        calls it. Nothing held: nothing is reduced."""
        self.engine.finish_gradient_sync()

    @property
    def shards_parameters(self) -> bool:
        """True at stage 3: each unit's parameters are gathered for its forward and for its
        backward (by hooks on its forward's outputs) and freed after, so a pass over the weight
        gradients alone must run through a unit's output again (see
        :mod:`distlab.pipeline_parallel.runtime.stage`)."""
        return self.stage == 3

    def close(self) -> None:
        """Stage 3: stop the communication thread and remove the hooks (the module's
        parameters are left sharded: read them with :meth:`full_state_dict` first)."""
        self.engine.close()

    def state_tensors(self) -> dict[str, list[torch.Tensor]]:
        """The tensors behind each model state on this rank: ``params``, ``grads``,
        ``optimizer`` (:meth:`distlab.zero.bucketed.Bucketed.state_tensors`,
        :meth:`distlab.zero.stage3.Stage3.state_tensors`). Storages may repeat;
        :func:`distlab.zero.measure.storage_bytes` dedupes."""
        return self.engine.state_tensors()

    @property
    def param_count(self) -> int:
        """Trainable parameters (elements), without padding."""
        return sum(p.numel() for p in self.params)
