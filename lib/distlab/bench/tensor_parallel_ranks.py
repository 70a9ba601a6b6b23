"""Rank code of ``python -m distlab.bench tensor-parallel``: one stack of MLP blocks split by
distlab's ``parallelize_module`` and by torch's with the same plan, timed in rotating rounds.

Every rank builds the same seeded model, ``layers`` blocks of ``Linear(width, 4 width)``, ReLU,
``Linear(4 width, width)`` (:func:`mlp_blocks`), twice: once split by
:func:`distlab.tensor_parallel.parallelize_module`, once by torch's
``torch.distributed.tensor.parallel.parallelize_module`` on a one-dimensional CPU device mesh,
each with the plan of :func:`block_plan` (the first Linear of a block column-wise, the second
row-wise: one all-reduce joins a block's forward). A case is one implementation; a round runs
``steps`` steps of each (forward on the same batch, ``out.pow(2).mean()``, backward), the case
order rotating from round to round.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from distlab.bench.rounds import Phases, rank_fences, timed_rounds

__all__ = ["IMPLEMENTATIONS", "block_plan", "mlp_blocks", "tp_bench_rank"]

IMPLEMENTATIONS = ("distlab", "torch")


def mlp_blocks(layers: int, width: int, seed: int = 0) -> nn.Sequential:
    """``layers`` blocks of ``Linear(width, 4 width), ReLU, Linear(4 width, width)``, seeded."""
    torch.manual_seed(seed)
    return nn.Sequential(*[nn.Sequential(nn.Linear(width, 4 * width), nn.ReLU(),
                                         nn.Linear(4 * width, width)) for _ in range(layers)])


def block_plan(layers: int, lib: Any) -> dict[str, Any]:
    """Megatron's split of every block in the styles of ``lib`` (distlab's or torch's)."""
    plan: dict[str, Any] = {}
    for i in range(layers):
        plan[f"{i}.0"] = lib.ColwiseParallel()
        plan[f"{i}.2"] = lib.RowwiseParallel()
    return plan


def _split(impl: str, layers: int, width: int, world_size: int) -> tuple[nn.Module, Any]:
    """The model split by ``impl``; the second value counts distlab's collectives (or None)."""
    model = mlp_blocks(layers, width)
    if impl == "distlab":
        import distlab.tensor_parallel as lib
        out = lib.parallelize_module(model, None, block_plan(layers, lib))
        return out, out.tp_comm
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import parallel as tlib
    mesh = init_device_mesh("cpu", (world_size,))
    return tlib.parallelize_module(model, mesh, block_plan(layers, tlib)), None


def tp_bench_rank(rank: int, world_size: int, layers: int, width: int, batch: int, steps: int,
                  rounds: int) -> dict[str, Any]:
    """Rank function: ``{"seconds": {impl: seconds per step, per round}, "loss": {impl: the
    last step's loss}, "counts": {collective: calls per step} (distlab's)}``."""
    torch.set_num_threads(1)
    x = torch.randn(batch, width, generator=torch.Generator().manual_seed(1234))
    runs = {impl: _split(impl, layers, width, world_size) for impl in IMPLEMENTATIONS}
    losses: dict[str, float] = {}

    def train(impl: str, _: Phases) -> None:
        model, _counter = runs[impl]
        for _ in range(steps):
            model.zero_grad(set_to_none=True)
            out = model(x)
            if not isinstance(out, torch.Tensor):
                raise TypeError(f"{impl}: the model returned {type(out).__name__}")
            loss = out.pow(2).mean()
            loss.backward()
            losses[impl] = float(loss.detach())

    timings = timed_rounds(list(IMPLEMENTATIONS), train, warmup=1, rounds=rounds, rotate=True,
                           fences=rank_fences(torch.device("cpu")))
    counter = runs["distlab"][1]
    before = dict(counter.counts)
    train("distlab", None)  # type: ignore[arg-type]
    counts = {k: (v - before.get(k, 0)) // steps for k, v in counter.counts.items()
              if v - before.get(k, 0)}
    return {"seconds": {impl: [t / steps for t in timings.seconds[i]]
                        for i, impl in enumerate(IMPLEMENTATIONS)},
            "loss": losses, "counts": counts}
