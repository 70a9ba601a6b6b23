"""Tensor-parallel styles in torch's shape, on plain local tensors (no DTensor).

``ColwiseParallel``, ``RowwiseParallel`` and ``SequenceParallel`` take the arguments of torch's
``torch.distributed.tensor.parallel`` styles of the same names. A placement (torch's word,
``torch.distributed.tensor.Placement``; the styles' arguments keep torch's names,
``input_layouts`` and ``output_layouts``) is :class:`Replicate` or :class:`Shard` (``Shard(1)``:
the sequence dimension of a ``(batch, seq, hidden)`` activation), :data:`Placement` the type of
either; torch's own ``Replicate()`` and ``Shard(d)`` are accepted too. Activations between
styles are the local pieces torch's ``use_local_output=True`` hands on: a ``Shard(d)`` layout
is this rank's contiguous chunk along ``d`` (chunks in rank order, equal sizes).

What each style does to a module (``p`` ranks, this rank ``r``):

- ``ColwiseParallel`` on ``nn.Linear``: keeps rows ``r`` of ``p`` of the weight and bias (output
  features); input ``Replicate`` goes through f (gradient all-reduced), input
  ``Shard(d)`` is all-gathered along ``d`` (gradient reduce-scattered); output ``Shard(-1)``
  stays local, ``Replicate`` is all-gathered. On ``nn.Embedding``: columns of the table.
- ``RowwiseParallel`` on ``nn.Linear``: keeps columns ``r`` of ``p`` of the weight (input
  features) and the whole bias; output ``Replicate`` is f_bar (all-reduce, then the
  bias), ``Shard(d)`` a reduce-scatter along ``d`` (the bias added on rank 0 before it). On
  ``nn.Embedding``: rows ``r`` of ``p`` of the table (a slice of the vocabulary), ids outside
  it give zeros before the reduction.
- ``SequenceParallel`` on ``nn.LayerNorm``, ``nn.RMSNorm`` and ``nn.Dropout``: parameters stay
  whole on every rank; the input is this rank's sequence chunk; the parameters' gradients,
  partial sums over the chunks, are all-reduced (f on each parameter).
- ``PrepareModuleInput`` on any module: each positional input goes from its layout to the
  desired one before the module runs (``Shard(d)`` -> ``Replicate``: all-gather along ``d``).
  With ``use_local_output=False`` (torch's default, where torch hands on a DTensor) the output
  is a replicated tensor whose gradient is reduced once here (reduce-scatter, or all-reduce for
  ``Replicate`` -> ``Replicate``), marked so the ``ColwiseParallel`` layers it feeds skip their
  own f: an attention's ``wq``, ``wk``, ``wv`` share one all-gather and one reduce-scatter.
  The mark is on the tensor object the module receives; the module must pass it unchanged to
  ``ColwiseParallel`` layers with a ``Replicate()`` input, as torch's attention does (a
  ``RowwiseParallel`` or a sharded-input ``ColwiseParallel`` refuses it with a
  ``RuntimeError``; anything else computing on it gets a wrong gradient).
  ``use_local_output=True``: a plain replicated tensor, each consumer reducing its own gradient
  (an all-gather's backward then keeps this rank's chunk).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from distlab.tensor_parallel import comm as C
from distlab.tensor_parallel.comm import TPComm

__all__ = ["ColwiseParallel", "ParallelStyle", "Placement", "PrepareModuleInput", "Replicate",
           "RowwiseParallel", "SequenceParallel", "Shard", "as_placement"]


@dataclass(frozen=True)
class Replicate:
    """Every rank holds the whole tensor."""


@dataclass(frozen=True)
class Shard:
    """Every rank holds its chunk along ``dim`` (negative counts from the end)."""

    dim: int


Placement = Replicate | Shard
"""Where a tensor's pieces are: torch's ``Placement`` of a DTensor, as local tensors use it."""


def as_placement(name: str, value: Any, allowed: tuple[str, ...]) -> Placement:
    """``value`` (distlab's or torch's Replicate/Shard) as distlab's placement; ``ValueError``
    naming ``name`` when it is none of ``allowed`` (``"Replicate"``, ``"Shard(-1)"``, ``"Shard"``
    for any dim)."""
    if isinstance(value, (Replicate, Shard)):
        out: Placement = value
    elif hasattr(value, "is_replicate") and value.is_replicate():
        out = Replicate()
    elif hasattr(value, "is_shard") and value.is_shard():
        out = Shard(int(value.dim))
    else:
        raise TypeError(f"{name} must be Replicate() or Shard(dim), got "
                        f"{type(value).__name__} {value!r}")
    text = "Replicate" if isinstance(out, Replicate) else f"Shard({out.dim})"
    if text not in allowed and not (isinstance(out, Shard) and "Shard" in allowed):
        raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {text}")
    return out


class ParallelStyle:
    """Base of the styles: :meth:`check` (no communication) then :meth:`apply`."""

    modules: tuple[type, ...] = ()

    def check(self, name: str, module: nn.Module, tp_size: int) -> None:
        """Raise ``ValueError`` naming the plan entry ``name`` if this style cannot split
        ``module`` over ``tp_size`` ranks."""
        if not isinstance(module, self.modules):
            kinds = ", ".join(f"nn.{m.__name__}" for m in self.modules)
            raise ValueError(f"parallelize_plan[{name!r}]: {type(self).__name__} applies to "
                             f"{kinds}; submodule {name!r} is {type(module).__name__}")

    def apply(self, module: nn.Module, comm: TPComm) -> nn.Module:
        """Split ``module`` in place for this rank of ``comm``'s group; returns it."""
        raise NotImplementedError


_MARKED_SHARD = ("a PrepareModuleInput(use_local_output=False) output must feed ColwiseParallel "
                 "layers with a Replicate() input (its gradient is reduced once, upstream); "
                 "use use_local_output=True to feed other layers")


def _replace(module: nn.Module, name: str, tensor: torch.Tensor) -> None:
    old = getattr(module, name)
    setattr(module, name, nn.Parameter(tensor.detach().clone().contiguous(),
                                       requires_grad=old.requires_grad))


def _in(x: torch.Tensor, layout: Placement, comm: TPComm, desired: Placement) -> torch.Tensor:
    """Bring an input from ``layout`` to ``desired`` (Replicate, or Shard(-1))."""
    marked = C.grad_reduced_by(x) is comm
    if isinstance(desired, Replicate):
        if isinstance(layout, Replicate):
            if marked or not x.is_floating_point():
                return x  # the producer (PrepareModuleInput) reduces the gradient once
            return C.copy_to_tp_region(x, comm)
        if marked:
            raise RuntimeError(_MARKED_SHARD)
        return C.gather_from_sp_region(x, comm, layout.dim)
    if marked:
        raise RuntimeError(_MARKED_SHARD)
    if isinstance(layout, Replicate):
        return C.split_to_tp_region(x, comm, desired.dim)
    return x


class ColwiseParallel(ParallelStyle):
    """Split output features (``nn.Linear``) or embedding columns (``nn.Embedding``).

    ``input_layouts``: the input's layout, ``Replicate()`` (default) or ``Shard(d)`` (the
    sequence-parallel chunk, all-gathered). ``output_layouts``: ``Shard(-1)`` (default) or
    ``Replicate()`` (all-gathered). ``use_local_output`` must be True (no DTensor here).
    """

    modules = (nn.Linear, nn.Embedding)

    def __init__(self, *, input_layouts: Any = None, output_layouts: Any = None,
                 use_local_output: bool = True) -> None:
        self.input_layout = as_placement("input_layouts", input_layouts or Replicate(),
                                      ("Replicate", "Shard"))
        self.output_layout = as_placement("output_layouts", output_layouts or Shard(-1),
                                       ("Replicate", "Shard(-1)"))
        _local_only(use_local_output)
        self.use_local_output = use_local_output

    def check(self, name: str, module: nn.Module, tp_size: int) -> None:  # noqa: D102
        super().check(name, module, tp_size)
        attr = "out_features" if isinstance(module, nn.Linear) else "embedding_dim"
        _divisible(name, module, attr, tp_size)

    def apply(self, module: nn.Module, comm: TPComm) -> nn.Module:  # noqa: D102
        if isinstance(module, nn.Linear):
            _replace(module, "weight", comm.chunk(module.weight, 0))
            if module.bias is not None:
                _replace(module, "bias", comm.chunk(module.bias, 0))
            module.out_features //= comm.size
        else:
            _replace(module, "weight", comm.chunk(module.weight, 1))
            module.embedding_dim //= comm.size
        original = module.forward
        in_layout, out_layout = self.input_layout, self.output_layout

        def forward(x: torch.Tensor) -> torch.Tensor:
            y = original(_in(x, in_layout, comm, Replicate()))
            if isinstance(out_layout, Replicate):
                y = C.gather_from_tp_region(y, comm, -1)
            return y

        module.forward = forward
        return module

    def __repr__(self) -> str:
        return (f"ColwiseParallel(input_layouts={self.input_layout}, "
                f"output_layouts={self.output_layout})")


class RowwiseParallel(ParallelStyle):
    """Split input features (``nn.Linear``) or the vocabulary (``nn.Embedding``).

    ``input_layouts``: ``Shard(-1)`` (default for Linear: a colwise output) or ``Replicate()``
    (split here); an Embedding's ids are always whole. ``output_layouts``: ``Replicate()``
    (default, all-reduce) or ``Shard(d)`` (reduce-scatter along ``d``, sequence parallel).
    """

    modules = (nn.Linear, nn.Embedding)

    def __init__(self, *, input_layouts: Any = None, output_layouts: Any = None,
                 use_local_output: bool = True) -> None:
        self.input_layout = (None if input_layouts is None else
                             as_placement("input_layouts", input_layouts,
                                       ("Replicate", "Shard(-1)")))
        self.output_layout = as_placement("output_layouts", output_layouts or Replicate(),
                                       ("Replicate", "Shard"))
        _local_only(use_local_output)
        self.use_local_output = use_local_output

    def check(self, name: str, module: nn.Module, tp_size: int) -> None:  # noqa: D102
        super().check(name, module, tp_size)
        attr = "in_features" if isinstance(module, nn.Linear) else "num_embeddings"
        _divisible(name, module, attr, tp_size)

    def apply(self, module: nn.Module, comm: TPComm) -> nn.Module:  # noqa: D102
        out_layout = self.output_layout
        if isinstance(module, nn.Linear):
            _replace(module, "weight", comm.chunk(module.weight, 1))
            module.in_features //= comm.size
            in_layout = self.input_layout or Shard(-1)

            def forward(x: torch.Tensor) -> torch.Tensor:
                x = _in(x, in_layout, comm, Shard(-1))
                return _reduce_and_bias(F.linear(x, module.weight), module.bias, out_layout,
                                        comm)
        else:
            _replace(module, "weight", comm.chunk(module.weight, 0))
            rows = module.num_embeddings // comm.size
            module.num_embeddings = rows
            first = comm.rank * rows

            def forward(ids: torch.Tensor) -> torch.Tensor:
                outside = (ids < first) | (ids >= first + rows)
                local = (ids - first).masked_fill(outside, 0)
                y = F.embedding(local, module.weight, module.padding_idx, module.max_norm,
                                module.norm_type, module.scale_grad_by_freq, module.sparse)
                y = y.masked_fill(outside.unsqueeze(-1), 0.0)
                return _reduce_and_bias(y, None, out_layout, comm)

        module.forward = forward
        return module

    def __repr__(self) -> str:
        return (f"RowwiseParallel(input_layouts={self.input_layout}, "
                f"output_layouts={self.output_layout})")


def _reduce_and_bias(y: torch.Tensor, bias: torch.Tensor | None, layout: Placement,
                     comm: TPComm) -> torch.Tensor:
    if isinstance(layout, Replicate):
        y = C.reduce_from_tp_region(y, comm)
        return y if bias is None else y + bias
    # the bias joins the partial sums once (on group rank 0) before the reduce-scatter, so its
    # gradient comes from the all-gathered (whole) output gradient: no all-reduce for it
    if bias is not None:
        y = y + C.replicate_to_partial(bias, comm)
    return C.reduce_scatter_to_sp(y, comm, layout.dim)


class SequenceParallel(ParallelStyle):
    """Run a norm or dropout on this rank's chunk of the sequence, parameters whole.

    ``sequence_dim``: the sequence dimension of the input (default 1). The input is taken to be
    this rank's chunk already (as torch takes a plain tensor); the output is the chunk too.
    """

    modules = (nn.LayerNorm, nn.RMSNorm, nn.Dropout)

    def __init__(self, *, sequence_dim: int = 1, use_local_output: bool = False) -> None:
        if isinstance(sequence_dim, bool) or not isinstance(sequence_dim, int):
            raise TypeError(f"sequence_dim must be an int, got {sequence_dim!r}")
        self.sequence_dim = sequence_dim
        self.use_local_output = use_local_output

    def apply(self, module: nn.Module, comm: TPComm) -> nn.Module:  # noqa: D102
        names = [n for n, _ in module.named_parameters(recurse=False)]
        if not names:
            return module
        params = {n: getattr(module, n) for n in names}
        original_forward = type(module).forward

        def forward(x: torch.Tensor) -> torch.Tensor:
            copies = {n: C.copy_to_tp_region(p, comm) for n, p in params.items()}
            saved = dict(module._parameters)
            try:
                for n in names:  # the copies stand in for the parameters for one call
                    del module._parameters[n]
                    object.__setattr__(module, n, copies[n])
                return original_forward(module, x)
            finally:
                for n in names:
                    object.__delattr__(module, n)
                module._parameters.update(saved)

        module.forward = forward
        return module

    def __repr__(self) -> str:
        return f"SequenceParallel(sequence_dim={self.sequence_dim})"


class PrepareModuleInput(ParallelStyle):
    """Bring a module's positional inputs to the layouts its submodules' styles expect.

    ``input_layouts``: the layout of each positional input (one layout, or a tuple with None
    for an input left alone, e.g. a mask or an int). ``desired_input_layouts``: what the module
    gets, same length. Supported per input: ``Shard(d)`` -> ``Replicate()`` (all-gather),
    ``Replicate()`` -> ``Shard(d)`` (own chunk), a layout to itself. ``use_local_output``: see
    the module docstring (default False, as torch's). Keyword inputs are not supported
    (``input_kwarg_layouts`` must be None).
    """

    modules = (nn.Module,)

    def __init__(self, *, input_layouts: Any = None, desired_input_layouts: Any = None,
                 input_kwarg_layouts: Any = None, desired_input_kwarg_layouts: Any = None,
                 use_local_output: bool = False) -> None:
        if input_kwarg_layouts or desired_input_kwarg_layouts:
            raise ValueError("input_kwarg_layouts / desired_input_kwarg_layouts are not "
                             "supported: pass the inputs positionally")
        ins = _as_tuple(input_layouts)
        wants = _as_tuple(desired_input_layouts)
        if len(ins) != len(wants):
            raise ValueError(f"input_layouts and desired_input_layouts must have the same "
                             f"length, got {len(ins)} and {len(wants)}")
        pairs: list[tuple[Placement, Placement] | None] = []
        for i, (a, b) in enumerate(zip(ins, wants, strict=True)):
            if a is None or b is None:
                if (a is None) != (b is None):
                    raise ValueError(f"input {i}: input_layouts and desired_input_layouts must "
                                     f"both be None or both a layout, got {a!r} and {b!r}")
                pairs.append(None)
                continue
            src = as_placement(f"input_layouts[{i}]", a, ("Replicate", "Shard"))
            dst = as_placement(f"desired_input_layouts[{i}]", b, ("Replicate", "Shard"))
            if isinstance(src, Shard) and isinstance(dst, Shard) and src != dst:
                raise ValueError(f"input {i}: Shard({src.dim}) -> Shard({dst.dim}) (an "
                                 f"all-to-all) is not supported")
            pairs.append((src, dst))
        self.layouts = tuple(pairs)
        if not isinstance(use_local_output, bool):
            raise TypeError(f"use_local_output must be a bool, got {use_local_output!r}")
        self.use_local_output = use_local_output

    def apply(self, module: nn.Module, comm: TPComm) -> nn.Module:  # noqa: D102
        layouts, local = self.layouts, self.use_local_output

        def prepare(_module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
            if len(args) < len(layouts):
                raise ValueError(f"PrepareModuleInput expects {len(layouts)} positional "
                                 f"inputs, got {len(args)}")
            out = list(args)
            for i, pair in enumerate(layouts):
                if pair is not None and isinstance(args[i], torch.Tensor):
                    out[i] = _prepare(args[i], *pair, comm, local)
            return tuple(out)

        module.register_forward_pre_hook(prepare)
        return module

    def __repr__(self) -> str:
        return (f"PrepareModuleInput(layouts={self.layouts}, "
                f"use_local_output={self.use_local_output})")


def _prepare(x: torch.Tensor, src: Placement, dst: Placement, comm: TPComm,
             local: bool) -> torch.Tensor:
    if isinstance(dst, Shard):
        return x if isinstance(src, Shard) else C.split_to_tp_region(x, comm, dst.dim)
    if isinstance(src, Shard):
        if local:
            return C.gather_from_tp_region(x, comm, src.dim)
        return C.mark_grad_reduced(C.gather_from_sp_region(x, comm, src.dim), comm)
    if local or not x.is_floating_point():
        return x
    return C.mark_grad_reduced(C.copy_to_tp_region(x, comm), comm)


def _as_tuple(value: Any) -> tuple[Any, ...]:
    if value is None:
        return ()
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _local_only(use_local_output: Any) -> None:
    if use_local_output is not True:
        raise ValueError(f"use_local_output must be True (distlab's tensor parallelism hands "
                         f"on local tensors, no DTensor), got {use_local_output!r}")


def _divisible(name: str, module: nn.Module, attr: str, tp_size: int) -> None:
    value = getattr(module, attr)
    if value % tp_size:
        raise ValueError(f"parallelize_plan[{name!r}]: {type(module).__name__}.{attr} = "
                         f"{value} is not divisible by the tensor-parallel size {tp_size}")
