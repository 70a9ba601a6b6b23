"""Rank functions used only by tests/zero/test_zero_stage3*.py (importable by spawned ranks)."""

from __future__ import annotations

from typing import Any

import torch

from distlab.nets import mlp
from distlab.timeline import Timeline
from distlab.zero.fsdp2_check import fsdp2_comparison_rank
from distlab.zero.optimizer import ZeroDataParallel
from helpers.zero_targets import recorder

WIDTH = 24


class Block(torch.nn.Module):
    """Linear + LayerNorm: a unit with two modules' parameters in it."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(width, width)
        self.norm = torch.nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.norm(self.lin(x)))


class Net(torch.nn.Module):
    """Two blocks, a head, and a parameter of the root's own (a scale)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.blocks = torch.nn.ModuleList([Block(WIDTH), Block(WIDTH)])
        self.head = torch.nn.Linear(WIDTH, 5)
        self.scale = torch.nn.Parameter(torch.ones(5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return self.head(x) * self.scale


def _blocks(m: torch.nn.Module) -> list[torch.nn.Module]:
    return list(m.blocks)  # type: ignore[union-attr]


def compare_with_fsdp2(rank: int, world_size: int) -> dict[str, Any]:
    """Every variant against FSDP2 on an MLP (every Linear a unit); stage 3 with and without
    prefetch and stage 1 on a net whose units are two blocks and the root (head and scale)."""
    return {"mlp": fsdp2_comparison_rank(rank, world_size, width=WIDTH),
            "net": fsdp2_comparison_rank(rank, world_size, width=WIDTH, model_fn=Net,
                                         units_fn=_blocks,
                                         variants=("stage3", "stage3 prefetch 0", "stage1"))}


def traced_steps(rank: int, world_size: int, prefetch: int) -> dict[str, Any]:
    """The spans of the second of two stage-3 steps on a 4-Linear MLP."""
    torch.set_num_threads(1)
    z = ZeroDataParallel(mlp(4, 64, 0), 3, prefetch=prefetch)
    g = torch.Generator().manual_seed(rank)
    for step in range(2):
        z.timeline = Timeline() if step == 1 else None
        z(torch.randn(6, 64, generator=g)).pow(2).mean().backward()
        z.step()
    assert z.timeline is not None
    spans = z.timeline.to_dicts()
    z.close()
    return {"spans": spans}


def misuse(rank: int, world_size: int) -> dict[str, str]:
    """The exception (type: message) of each misuse of stage 3."""
    errors: dict[str, str] = {}
    attempt = recorder(errors)

    m = mlp(2, 4, 0)
    attempt("units at stage 1", lambda: ZeroDataParallel(m, 1, units=[m[0]]))
    attempt("prefetch -1", lambda: ZeroDataParallel(mlp(1, 4, 0), 3, prefetch=-1))
    attempt("foreign unit", lambda: ZeroDataParallel(mlp(1, 4, 0), 3,
                                                     units=[torch.nn.Linear(2, 2)]))
    shared = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    shared[1].weight = shared[0].weight
    attempt("shared parameter", lambda: ZeroDataParallel(shared, 3, units=[shared[0],
                                                                           shared[1]]))
    z = ZeroDataParallel(mlp(2, 4, 0), 3)
    from torch.distributed.algorithms.join import Join
    attempt("join", lambda: Join([z]))
    z.close()
    return errors


def peer_leaves(rank: int, world_size: int) -> str:
    """Rank 1 leaves after one step; rank 0's next gather must fail with a named error (the
    type and first line), not hang."""
    from distlab.uneven import UnevenInputsError
    z = ZeroDataParallel(mlp(2, 8, 0), 3, timeout=5)
    x = torch.ones(2, 8)
    z(x).sum().backward()
    z.step()
    if rank == 1:
        return "left"
    try:
        z(x).sum().backward()
        z.step()
    except UnevenInputsError as exc:
        return f"UnevenInputsError: {str(exc).splitlines()[0]}"
    return "no error"
