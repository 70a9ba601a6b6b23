"""Which optimizer ZeRO steps on its shards: Adam by default, or any ``torch.optim`` optimizer.

ZeRO hands the optimizer tensors that are this rank's part of the parameters (a bucket's shard
at stages 1-2, the whole bucket at stage 0, each parameter's slice of its unit's shard at stage
3), as torch FSDP2 hands it each parameter's local shard. An optimizer whose update of an
element reads only that element and its own state (SGD with or without momentum, Adam, AdamW,
RMSprop, Adagrad, NAdam, ...) therefore does on the shards exactly what it does on the whole
model: the result equals FSDP2's (and DDP's) with the same optimizer. One that reads the whole
tensor (a norm, a row or column statistic: Adafactor, LBFGS) sees only the shard: FSDP2 gives it
a DTensor instead, so the two differ.

    ZeroDataParallel(model, 3)                                           # Adam(lr=1e-3)
    ZeroDataParallel(model, 3, optimizer=torch.optim.SGD,
                     optimizer_kwargs={"lr": 0.1, "momentum": 0.9})
    ZeroDataParallel(model, 3, optimizer=lambda ps: torch.optim.AdamW(ps, lr=1e-3))
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

__all__ = ["OptimizerSpec", "build_optimizer"]

#: A ``torch.optim.Optimizer`` subclass, or a factory ``params -> Optimizer``.
OptimizerSpec = type[torch.optim.Optimizer] | Callable[[list[torch.Tensor]], torch.optim.Optimizer]

_ADAM_DEFAULTS: dict[str, Any] = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8,
                                  "weight_decay": 0.0}


def build_optimizer(params: Sequence[torch.Tensor], optimizer: OptimizerSpec | None,
                    optimizer_kwargs: Mapping[str, Any] | None,
                    adam_args: Mapping[str, Any]) -> torch.optim.Optimizer:
    """The optimizer over ``params`` (the shards).

    Args:
        params: the tensors to step.
        optimizer: ``None`` (``torch.optim.Adam`` with ``adam_args``), an optimizer class
            (called as ``optimizer(params, **optimizer_kwargs)``) or a factory (called as
            ``optimizer(params)``).
        optimizer_kwargs: keyword arguments of an optimizer class (not of a factory).
        adam_args: ``lr``, ``betas``, ``eps``, ``weight_decay`` given to ``ZeroDataParallel``
            (``None`` where not given); only with ``optimizer=None``.

    Raises:
        TypeError: ``optimizer`` neither an optimizer class nor callable, a factory that does
            not return a ``torch.optim.Optimizer``, ``optimizer_kwargs`` not a mapping.
        ValueError: Adam's arguments beside ``optimizer=``, or ``optimizer_kwargs`` with a
            factory or without ``optimizer``.
    """
    given = {k: v for k, v in adam_args.items() if v is not None}
    if optimizer_kwargs is not None and not isinstance(optimizer_kwargs, Mapping):
        raise TypeError(f"optimizer_kwargs must be a mapping of keyword arguments, got "
                        f"{type(optimizer_kwargs).__name__}")
    params = list(params)
    if optimizer is None:
        if optimizer_kwargs is not None:
            raise ValueError("optimizer_kwargs= needs optimizer= (an optimizer class); Adam's "
                             "own arguments are lr=, betas=, eps=, weight_decay=")
        return torch.optim.Adam(params, **{**_ADAM_DEFAULTS, **given})
    if given:
        raise ValueError(f"{', '.join(f'{k}=' for k in given)} are Adam's arguments; with "
                         f"optimizer= pass them in optimizer_kwargs (a class) or inside the "
                         "factory")
    if isinstance(optimizer, type):
        if not issubclass(optimizer, torch.optim.Optimizer):
            raise TypeError(f"optimizer must be a torch.optim.Optimizer subclass or a factory "
                            f"params -> Optimizer, got the class {optimizer.__name__}")
        return optimizer(params, **dict(optimizer_kwargs or {}))
    if not callable(optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer subclass or a factory "
                        f"params -> Optimizer, got {type(optimizer).__name__}")
    if optimizer_kwargs is not None:
        raise ValueError("optimizer_kwargs= is for an optimizer class; a factory takes its "
                         "arguments itself")
    opt = optimizer(params)
    if not isinstance(opt, torch.optim.Optimizer):
        raise TypeError(f"optimizer factory returned {type(opt).__name__}, not a "
                        "torch.optim.Optimizer")
    return opt
