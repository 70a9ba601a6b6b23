"""What :class:`~distlab.zero.optimizer.ZeroDataParallel` calls on the engine of its stage.

``ZeroDataParallel`` is one interface over two engines: :class:`distlab.zero.bucketed.Bucketed`
(stages 0-2: parameters in flat buckets, each reduced once complete) and
:class:`distlab.zero.stage3.Stage3` (stage 3: units gathered ahead of their forward and
backward). Both are a :class:`ZeroEngine`; ``Bucketed`` is also a :class:`BucketEngine`, whose
calls are the buckets and the Join protocol, which stage 3 does not offer. ``ZeroDataParallel``
calls nothing else of an engine and writes none of its attributes but ``sync``.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from distlab.zero.partition import Bucket

__all__ = ["BucketEngine", "ZeroEngine"]


class ZeroEngine(Protocol):
    """One stage's training machinery on this rank.

    ``optimizer``: the ``torch.optim.Optimizer`` over what this rank steps. ``sync``: whether
    a backward reduces its gradients (``False``: they accumulate until a backward with ``True``
    or :meth:`finish_gradient_sync`); ``ZeroDataParallel`` sets it.
    """

    optimizer: torch.optim.Optimizer
    sync: bool

    def after_forward(self, output: Any) -> None:
        """Called with the output of each forward of the module (the engine may hook it)."""
        ...

    def step(self) -> None:
        """The optimizer on this rank's part of the parameters, then whatever makes the
        parameters whole again where the stage keeps them whole.

        Raises:
            RuntimeError: gradients left unreduced (see the engine's own ``step``).
        """
        ...

    def finish_gradient_sync(self) -> None:
        """Reduce now what backwards with ``sync`` off accumulated (a collective)."""
        ...

    def full_parameters(self) -> dict[int, torch.Tensor]:
        """``id(parameter) -> full value`` (a copy) of each parameter this rank holds only a
        shard of; every rank calls it where that gathers. Empty where all are whole."""
        ...

    def sharded_ids(self) -> set[int]:
        """``id`` of each parameter this rank holds only a shard of."""
        ...

    def load_parameters(self, values: dict[int, torch.Tensor]) -> None:
        """After ``ZeroDataParallel`` copied the values it could into the module, take
        ``values`` (``id(tensor) -> full value``, every parameter and buffer) into what the
        engine holds beside them: shards, fp32 master copies. No collective."""
        ...

    def state_tensors(self) -> dict[str, list[torch.Tensor]]:
        """The tensors behind ``params``, ``grads`` and ``optimizer`` on this rank (storages
        may repeat)."""
        ...

    def close(self) -> None:
        """Stop what runs in the background and remove the hooks (nothing at stages 0-2)."""
        ...


class BucketEngine(ZeroEngine, Protocol):
    """An engine that keeps every parameter in flat bucket buffers (stages 0-2), and offers
    torch's Join protocol over them.

    ``flats``: the flat parameter buffer of each bucket; ``masters``: what the optimizer steps
    per bucket; ``buckets``: the bucket layouts.
    """

    flats: list[torch.Tensor]
    masters: list[torch.nn.Parameter]
    buckets: list[Bucket]

    def set_divide_factor(self, work: Any, divide_by_initial_world_size: bool) -> None:
        """Inside ``Join``, before a forward: scale this iteration's gradients by
        ``1/world``, or (``divide_by_initial_world_size=False``) by one over the ranks not yet
        joined, the sum of the "not joined" allreduce ``work`` (``None`` for all joinables
        but the first)."""
        ...

    def shadow_iteration(self) -> None:
        """Joined rank: shadow one iteration of the ranks still training (zeros into each
        bucket's collective, then the usual step)."""
        ...
