"""One pipeline stage: a submodule, its place in the pipeline, and what it holds per microbatch.

:class:`PipelineStage` takes torch.distributed.pipelining's ``PipelineStage`` arguments, in
torch's order (``submodule, stage_index, num_stages, device, input_args=None, output_args=None,
output_grads=None, input_grads=None, group=None, dw_builder=None, get_mesh=None``).
``input_args`` and ``output_args`` are optional examples of one microbatch's input and output
(a tensor or a tuple of tensors): they are checked against what really arrives and leaves, never
needed, because the first step sends each boundary's shapes and dtypes once (:mod:`.p2p`). The
examples are compared on dtypes and on every dim after the batch dim (dim 0 may differ: a batch
that does not divide evenly gives microbatches of two sizes). ``output_grads`` and
``input_grads`` (examples of the gradients) are accepted and not needed: gradients have their
activations' shapes. ``dw_builder`` and ``get_mesh`` (custom weight-gradient runners, DTensor
meshes) are not supported and must stay ``None``.

A schedule (:mod:`.schedules`) drives the stage: per microbatch, :meth:`PipelineStage.forward`
(the submodule on the inputs received or handed over, plus the loss on the last stage), then
:meth:`~PipelineStage.backward` (``B``), or :meth:`~PipelineStage.backward_input` (``I``) and
:meth:`~PipelineStage.backward_weight` (``W``); see :mod:`.backward`. A submodule wrapped in a
data-parallel module with ``no_sync()`` (torch's DDP, distlab's :class:`~distlab.ddp.DDP`) runs
every forward and every backward but the stage's last one of the step under ``no_sync()``, so
its gradients are reduced once per step, as torch's stage does: both DDPs decide in forward
whether the backward reduces, so the last backward's reducer is armed from its roots first
(``reducer.prepare_for_backward``, as torch's stage does).

A submodule may also be a :class:`distlab.zero.ZeroDataParallel` (any ZeRO stage; it is not an
``nn.Module``: the stage runs the wrapper and reads the parameters of its ``module``). Every
forward and backward of the step runs under its ``no_sync()``, gradients summing over the
microbatches, and after the stage's last ``B`` or ``W`` of the step its
``finish_gradient_sync()`` reduces them once; ``ZeroDataParallel.step()`` follows the schedule's
``step()``. Where it ``shards_parameters`` (stage 3: a unit is gathered for its backward by a hook
on its forward's outputs and freed when that backward ends), ``W`` runs the backward from the
stage's roots again to the parameters instead of the weight sides alone, so each unit is
gathered again before its weight gradients are computed (the input chain is computed twice).

Tensor parallelism inside a stage (TP x PP, as torch composes ``parallelize_module`` with
``PipelineStage``): lay the ranks out on a mesh with the TP dimension last, ``init_mesh((pp, tp),
("pp", "tp"))`` (or ``(pp, dp, tp)``, ``("pp", "dp", "tp")``), split each stage's module over
``mesh.get_group("tp")`` with :func:`~distlab.tensor_parallel.parallelize_module`, and give
``group=mesh.get_group("pp")``: the ranks of this rank's TP coordinate, one per pipeline rank. Then
pipeline rank ``i``'s TP rank ``t`` sends to and receives from pipeline rank ``i + 1``'s TP rank
``t`` only, and every TP rank of a stage runs the same actions in the same order, so the stage's TP
collectives match up across its ranks. What crosses a boundary is each TP rank's own local tensor:
with a stage that ends in a ``RowwiseParallel`` (output ``Replicate``) and a next stage that starts
with a ``ColwiseParallel`` (input ``Replicate``), every TP rank sends and receives the same whole
activation, and the gradient sent back, all-reduced by the next stage's Megatron f, is the same on
every TP rank too. The first stage's TP ranks each take the whole batch in ``step()``, the last
stage's each the whole target, and each computes the same loss. A split backward runs the TP
collectives in ``I`` (they lie on the input chain) and ``W`` the weight sides only, so none runs
twice (on the first stage, whose ``W`` is the whole backward, they run in ``W``). A stage whose TP
group (found as the ``tp_comm`` that ``parallelize_module`` sets) shares a rank other than this one
with its pipeline group is refused with a ``ValueError``: that group would send one stage's
activations to a rank of the same stage.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from distlab._checks import check_int
from distlab.pipeline_parallel.runtime.backward import (
    WeightJob,
    backward_full,
    backward_input,
    backward_weight,
)
from distlab.pipeline_parallel.runtime.measure import ActivationMeter
from distlab.pipeline_parallel.runtime.p2p import TensorMeta, describe, metas_of

__all__ = ["PipelineStage"]


def _example_metas(name: str, value: Any) -> tuple[TensorMeta, ...] | None:
    if value is None:
        return None
    tensors = (value,) if isinstance(value, torch.Tensor) else value
    if not isinstance(tensors, (tuple, list)) or not tensors or not all(
            isinstance(t, torch.Tensor) for t in tensors):
        raise TypeError(f"{name} must be None, a Tensor or a non-empty tuple of Tensors (an "
                        f"example microbatch), got {type(value).__name__}")
    return metas_of(tuple(tensors))


def _example_grads(name: str, value: Any) -> None:
    if value is None:
        return
    items = (value,) if isinstance(value, torch.Tensor) else value
    if not isinstance(items, (tuple, list)) or not all(
            t is None or isinstance(t, torch.Tensor) for t in items):
        raise TypeError(f"{name} must be None, a Tensor or a tuple of Tensors (or None), got "
                        f"{type(value).__name__}")


def _same(got: tuple[TensorMeta, ...], want: tuple[TensorMeta, ...]) -> bool:
    """Same count, dtypes and dims after dim 0."""
    return len(got) == len(want) and all(
        g.dtype == w.dtype and len(g.shape) == len(w.shape) and g.shape[1:] == w.shape[1:]
        for g, w in zip(got, want, strict=True))


class PipelineStage:
    """One stage of a pipeline on this rank (see the module docstring).

    Args:
        submodule: the stage's part of the model: an ``nn.Module`` (torch's or distlab's DDP
            included), or a :class:`distlab.zero.ZeroDataParallel` around it.
        stage_index: its stage, from 0.
        num_stages: stages in the whole pipeline.
        device: where the stage computes (its inputs and received tensors go there).
        input_args: optional example input of one microbatch (Tensor or tuple), checked against
            what the previous stage sends.
        output_args: optional example output of one microbatch, checked against the output.
        output_grads, input_grads: optional gradient examples (type-checked only).
        group: the pipeline's process group (``None``: the default group, or none at all for a
            one-process pipeline): one rank per pipeline rank, in pipeline-rank order. With
            tensor parallelism inside the stages, the mesh's ``"pp"`` group (the ranks of this
            rank's TP coordinate).
        dw_builder, get_mesh: torch's; must be ``None``.

    Raises:
        TypeError: ``submodule`` is neither an ``nn.Module`` nor a ``ZeroDataParallel``, an
            index is not an int, ``device`` is not a device, str or int, an example is not a
            tensor or tuple of tensors.
        ValueError: ``num_stages < 1``, ``stage_index`` outside ``[0, num_stages - 1]``, a
            device string torch does not know, ``dw_builder``/``get_mesh`` given, or a
            tensor-parallel submodule whose TP group shares a rank other than this one with
            ``group`` (pass the mesh's ``"pp"`` group; see the module docstring).
    """

    def __init__(self, submodule: Any, stage_index: int, num_stages: int,
                 device: torch.device | str | int, input_args: Any = None,
                 output_args: Any = None, output_grads: Any = None, input_grads: Any = None,
                 group: Any = None, dw_builder: Any = None, get_mesh: Any = None) -> None:
        self.module = _module_of(submodule)
        """The ``nn.Module`` whose parameters the stage trains (``submodule`` itself, or a
        ``ZeroDataParallel``'s ``module``)."""
        self.num_stages = check_int("num_stages", num_stages, minimum=1)
        self.stage_index = check_int("stage_index", stage_index, minimum=0,
                                     maximum=self.num_stages - 1)
        if isinstance(device, bool) or not isinstance(device, (torch.device, str, int)):
            raise TypeError(f"device must be a torch.device, a str like 'cpu' or 'cuda:0', or "
                            f"an int, got {type(device).__name__} {device!r}")
        try:
            self.device = torch.device(device)
        except (RuntimeError, TypeError) as exc:
            raise ValueError(f"device={device!r} is not a device torch knows; allowed: e.g. "
                             "'cpu', 'cuda', 'cuda:0', a torch.device or a GPU index") from exc
        self.submod = submodule
        self.group = group
        self.group_rank = dist.get_rank(group) if dist.is_initialized() else 0
        self.group_size = dist.get_world_size(group) if dist.is_initialized() else 1
        _check_tp_groups(self.module, group, self.stage_index)
        self.input_meta = _example_metas("input_args", input_args)
        self.output_meta = _example_metas("output_args", output_args)
        _example_grads("output_grads", output_grads)
        _example_grads("input_grads", input_grads)
        for name, value in (("dw_builder", dw_builder), ("get_mesh", get_mesh)):
            if value is not None:
                raise ValueError(f"{name}={value!r} is not supported by distlab's PipelineStage "
                                 f"(weight gradients run on autograd, no DTensor); pass "
                                 f"{name}=None")
        self.has_backward = True
        self.microbatches_in_step = 1
        """Microbatches of the step running (set by the schedule); shapes are kept per
        ``(microbatches_in_step, microbatch)``."""
        self._sent_metas: dict[tuple[int, int], tuple[TensorMeta, ...]] = {}
        self.recv_metas: dict[tuple[int, int], tuple[TensorMeta, ...]] = {}
        """Input shapes, learnt from the previous stage at the first step."""
        self.sent_headers: set[tuple[int, int]] = set()
        """The microbatches whose output shapes were sent to the next stage."""
        self.clear_runtime_states()

    # ---- identity ------------------------------------------------------------------------
    @property
    def is_first(self) -> bool:
        """True for stage 0."""
        return self.stage_index == 0

    @property
    def is_last(self) -> bool:
        """True for the last stage."""
        return self.stage_index == self.num_stages - 1

    def __repr__(self) -> str:
        return (f"PipelineStage(stage {self.stage_index} of {self.num_stages}, pipeline rank "
                f"{self.group_rank} of {self.group_size}, {self.device})")

    # ---- per-step state --------------------------------------------------------------------
    def clear_runtime_states(self) -> None:
        """Forget everything held for the microbatches of the last step (shapes learnt at the
        first step are kept)."""
        self._inputs: dict[int, tuple[Any, ...]] = {}
        self._fwd: dict[int, tuple[tuple[Any, ...], tuple[torch.Tensor, ...]]] = {}
        self._to_send: dict[int, tuple[torch.Tensor, ...]] = {}
        self._out_grads: dict[int, tuple[torch.Tensor, ...]] = {}
        self._in_grads: dict[int, tuple[torch.Tensor, ...]] = {}
        self._jobs: dict[int, WeightJob] = {}
        self.losses: dict[int, torch.Tensor] = {}
        """The last stage's loss per microbatch (detached)."""
        self.output_chunks: dict[int, Any] = {}
        """The last stage's output per microbatch (detached)."""

    def set_inputs(self, microbatch: int, tensors: tuple[torch.Tensor, ...]) -> None:
        """The inputs of ``microbatch``, from the previous stage (received or handed over):
        floating ones become leaves that collect their gradient."""
        want_grad = self.has_backward and torch.is_grad_enabled()
        self._inputs[microbatch] = tuple(
            t.detach().requires_grad_(want_grad and (t.is_floating_point() or t.is_complex()))
            for t in tensors)

    def set_output_grads(self, microbatch: int, grads: tuple[torch.Tensor, ...]) -> None:
        """Gradients of ``microbatch``'s floating outputs, from the next stage."""
        self._out_grads[microbatch] = tuple(grads)

    def take_outputs(self, microbatch: int) -> tuple[torch.Tensor, ...]:
        """The outputs of ``microbatch`` to pass on (each returned once)."""
        return self._to_send.pop(microbatch)

    def take_input_grads(self, microbatch: int) -> tuple[torch.Tensor, ...]:
        """The gradients of ``microbatch``'s floating inputs to pass back (each returned
        once)."""
        return self._in_grads.pop(microbatch)

    def output_metas(self, microbatch: int) -> tuple[TensorMeta, ...] | None:
        """Shapes of ``microbatch``'s outputs: from this step's forward, else the last one
        sent, else ``None``."""
        held = self._fwd.get(microbatch)
        if held is not None:
            return metas_of(held[1])
        return self._sent_metas.get(self.key(microbatch))

    def key(self, microbatch: int) -> tuple[int, int]:
        """``(microbatches_in_step, microbatch)``: what shapes learnt at a first step are kept
        under."""
        return self.microbatches_in_step, microbatch

    # ---- checks --------------------------------------------------------------------------
    def check_received(self, microbatch: int, metas: tuple[TensorMeta, ...]) -> None:
        """Check what the previous stage sends for ``microbatch`` against ``input_args``.

        Raises:
            ValueError: naming both stages and both shapes.
        """
        if self.input_meta is not None and not _same(metas, self.input_meta):
            raise ValueError(
                f"stage {self.stage_index - 1} outputs {describe(metas)} for microbatch "
                f"{microbatch}, but stage {self.stage_index}'s input_args expect "
                f"{describe(self.input_meta)} (dtypes and every dim after the batch dim must "
                "match)")

    def _check_output(self, microbatch: int, outs: tuple[torch.Tensor, ...]) -> None:
        metas = metas_of(outs)
        if self.output_meta is not None and not _same(metas, self.output_meta):
            raise ValueError(
                f"stage {self.stage_index} outputs {describe(metas)} for microbatch "
                f"{microbatch}, but its output_args say {describe(self.output_meta)}")
        before = self._sent_metas.get(self.key(microbatch))
        if before is not None and before != metas:
            raise ValueError(
                f"stage {self.stage_index} outputs {describe(metas)} for microbatch "
                f"{microbatch}, but {describe(before)} at the first step: the shapes passed "
                "between stages are fixed at the first step (as in torch.distributed."
                "pipelining); build new stages and a new schedule for another batch size")
        self._sent_metas[self.key(microbatch)] = metas

    # ---- compute ---------------------------------------------------------------------------
    def parameters(self) -> list[torch.Tensor]:
        """The stage module's parameters (a wrapper's: its ``module``'s)."""
        return list(self.module.parameters())

    def _ddp_kind(self) -> str | None:
        if isinstance(self.submod, torch.nn.parallel.DistributedDataParallel):
            return "torch"
        if self.submod is not self.module:
            return "zero"
        return "no_sync" if callable(getattr(self.submod, "no_sync", None)) else None

    @contextmanager
    def _sync(self, last: bool, roots: list[torch.Tensor]) -> Iterator[None]:
        kind = self._ddp_kind()
        if kind is None:
            yield
            return
        if kind == "zero":  # accumulate every microbatch, reduce once after the last
            with self.submod.no_sync():  # type: ignore[operator]
                yield
            if last:
                self.submod.finish_gradient_sync()  # type: ignore[operator]
            return
        if not last:
            with self.submod.no_sync():  # type: ignore[operator]
                yield
            return
        # its forward ran under no_sync: arm the reducer for this backward
        reducer = getattr(self.submod, "reducer", None)
        if kind == "torch":
            reducer.prepare_for_backward(  # type: ignore[union-attr]
                list(torch.nn.parallel.distributed._find_tensors(roots)))
        elif callable(getattr(reducer, "prepare_for_backward", None)):  # distlab's DDP
            reducer.prepare_for_backward(roots, True)  # type: ignore[union-attr]
        yield

    def forward(self, microbatch: int, args: tuple[Any, ...], kwargs: dict[str, Any],
                meter: ActivationMeter | None = None,
                loss_fn: Callable[..., torch.Tensor] | None = None, target: Any = None,
                loss_kwargs: dict[str, Any] | None = None, keep_output: bool = True) -> None:
        """``F``: the submodule on ``microbatch`` (``args`` on the first stage, the inputs set
        by :meth:`set_inputs` on the others); on the last stage also ``loss_fn(output,
        target, **loss_kwargs)`` when ``loss_fn`` is given.

        Raises:
            RuntimeError: the inputs of ``microbatch`` never arrived.
            ValueError: a stage before the last returns something other than tensors, or the
                output does not match ``output_args`` or the first step's shapes.
        """
        if self.is_first:
            inputs = tuple(args)
        else:
            if microbatch not in self._inputs:
                raise RuntimeError(f"stage {self.stage_index}: forward of microbatch "
                                   f"{microbatch} before its inputs arrived")
            inputs = self._inputs.pop(microbatch)
        grad = self.has_backward and torch.is_grad_enabled()
        saving = meter.saving(self.stage_index, microbatch) if meter is not None and grad \
            else nullcontext()
        nosync = self.submod.no_sync() if self._ddp_kind() is not None else nullcontext()
        with saving, torch.set_grad_enabled(grad):
            with nosync:
                out = self.submod(*inputs, **kwargs)
            loss = None
            if self.is_last and loss_fn is not None:
                loss = loss_fn(out, target, **(loss_kwargs or {}))
        if self.is_last:
            if loss is not None:
                self.losses[microbatch] = loss.detach()
            if keep_output:
                self.output_chunks[microbatch] = _detached(out)
            if grad:
                self._fwd[microbatch] = (inputs, (loss,) if loss is not None else ())
            return
        outs = out if isinstance(out, tuple) else (out,)
        if not all(isinstance(t, torch.Tensor) for t in outs):
            kinds = ", ".join(type(t).__name__ for t in outs)
            raise ValueError(f"stage {self.stage_index} returned ({kinds}); a stage before the "
                             "last must return a Tensor or a tuple of Tensors")
        self._check_output(microbatch, outs)
        self._to_send[microbatch] = outs
        if grad:
            self._fwd[microbatch] = (inputs, outs)

    def _roots(self, microbatch: int, scale: float
               ) -> tuple[tuple[Any, ...], list[torch.Tensor], list[torch.Tensor]]:
        if microbatch not in self._fwd:
            raise RuntimeError(f"stage {self.stage_index}: backward of microbatch {microbatch} "
                               "without its forward (or twice)")
        inputs, outs = self._fwd.pop(microbatch)
        if self.is_last:
            roots = list(outs)
            if not roots:
                raise RuntimeError(f"stage {self.stage_index} (the last): backward of "
                                   f"microbatch {microbatch} without a loss (loss_fn=None?)")
            return inputs, roots, [torch.full_like(r, scale) for r in roots]
        if microbatch not in self._out_grads:
            raise RuntimeError(f"stage {self.stage_index}: backward of microbatch {microbatch} "
                               "before the gradients of its outputs arrived")
        grads = iter(self._out_grads.pop(microbatch))
        roots, seeds = [], []
        for t in outs:
            if t.is_floating_point() or t.is_complex():
                g = next(grads)
                if t.requires_grad:
                    roots.append(t)
                    seeds.append(g)
        return inputs, roots, seeds

    def _keep_input_grads(self, microbatch: int, inputs: tuple[Any, ...],
                          grads: tuple[torch.Tensor | None, ...]) -> None:
        if self.is_first:
            return
        self._in_grads[microbatch] = tuple(
            g if g is not None else torch.zeros_like(x)
            for x, g in zip(inputs, grads, strict=True)
            if isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex()))

    def backward(self, microbatch: int, scale: float, last: bool,
                 meter: ActivationMeter | None = None) -> None:
        """``B``: input and parameter gradients of ``microbatch`` at once; the loss (last stage)
        is seeded with ``scale``. ``last``: the stage's last gradient of the step (reduce now
        under DDP)."""
        inputs, roots, seeds = self._roots(microbatch, scale)
        with self._sync(last, roots):
            grads = backward_full(roots, seeds, inputs)
        self._keep_input_grads(microbatch, inputs, grads)
        if meter is not None:
            meter.release(self.stage_index, microbatch)

    def backward_input(self, microbatch: int, scale: float) -> None:
        """``I``: the input gradients of ``microbatch`` only; :meth:`backward_weight` finishes
        it."""
        inputs, roots, seeds = self._roots(microbatch, scale)
        zero = self._ddp_kind() == "zero"
        regather = zero and bool(getattr(self.submod, "shards_parameters", False))
        with self.submod.no_sync() if zero else nullcontext():  # type: ignore[operator]
            grads, job = backward_input(roots, seeds, inputs if not self.is_first else (),
                                        split=not regather)
        if self.is_first:
            grads = ()
        self._keep_input_grads(microbatch, inputs, grads)
        self._jobs[microbatch] = job

    def backward_weight(self, microbatch: int, last: bool,
                        meter: ActivationMeter | None = None) -> None:
        """``W``: the parameter gradients of ``microbatch`` after its ``I``."""
        job = self._jobs.pop(microbatch, None)
        if job is None:
            raise RuntimeError(f"stage {self.stage_index}: W of microbatch {microbatch} "
                               "without its I (or twice)")
        with self._sync(last, job.roots):
            backward_weight(job, self.parameters())
        if meter is not None:
            meter.release(self.stage_index, microbatch)


def _check_tp_groups(module: nn.Module, group: Any, stage_index: int) -> None:
    """Refuse a pipeline ``group`` that holds another rank of the stage's own TP group (each
    ``tp_comm`` that :func:`distlab.tensor_parallel.parallelize_module` left on a submodule)."""
    if not dist.is_initialized():
        return
    comms = {id(c): c for m in module.modules()
             if (c := getattr(m, "tp_comm", None)) is not None and hasattr(c, "group")}
    if not comms:
        return
    world = dist.group.WORLD
    me = dist.get_rank()
    pipe = dist.get_process_group_ranks(group if group is not None else world)
    for comm in comms.values():
        tp = dist.get_process_group_ranks(comm.group if comm.group is not None else world)
        shared = sorted(set(tp) & set(pipe) - {me})
        if shared:
            raise ValueError(
                f"stage {stage_index}'s module is split over the tensor-parallel group of ranks "
                f"{sorted(tp)}, and its pipeline group (group=) holds ranks {sorted(pipe)}: "
                f"they share ranks {shared} besides this rank {me}, so a stage would send to a "
                "rank of its own TP group. A pipeline group holds one rank per stage, the ranks "
                "of this rank's TP coordinate: with init_mesh((pp, tp), ('pp', 'tp')) pass "
                "group=mesh.get_group('pp') and split the stage over mesh.get_group('tp')")


def _module_of(submodule: Any) -> nn.Module:
    """``submodule`` if it is an ``nn.Module``; a ``ZeroDataParallel``'s ``module``."""
    if isinstance(submodule, nn.Module):
        return submodule
    inner = getattr(submodule, "module", None)
    if isinstance(inner, nn.Module) and all(callable(getattr(submodule, name, None)) for name in (
            "__call__", "no_sync", "finish_gradient_sync")):
        return inner
    raise TypeError(f"submodule must be a torch.nn.Module (or one wrapped in torch's DDP, "
                    f"distlab's DDP or distlab's ZeroDataParallel), got "
                    f"{type(submodule).__name__}")


def _detached(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, (tuple, list)):
        return type(value)(_detached(v) for v in value)
    if isinstance(value, dict):
        return {k: _detached(v) for k, v in value.items()}
    return value
