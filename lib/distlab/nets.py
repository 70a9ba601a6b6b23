"""The small networks distlab's labs and benchmarks train: one builder, one seeding.

:func:`mlp` is the model of the DDP and ZeRO checks, measurements and benchmarks: every rank that
builds it with the same arguments holds the same weights, so results of two wrappers (distlab's
DDP beside torch's, a ZeRO stage beside DDP) can be compared parameter by parameter.

    from distlab.nets import mlp
    model = mlp(layers=8, width=1024, seed=0)
"""

from __future__ import annotations

import torch

__all__ = ["mlp"]


def mlp(layers: int, width: int, seed: int) -> torch.nn.Sequential:
    """``layers`` x (``Linear(width, width)``, ``ReLU``), initialised right after
    ``torch.manual_seed(seed)`` (it reseeds torch's global generator), in that order, so the
    same arguments give the same weights in any process."""
    torch.manual_seed(seed)
    mods: list[torch.nn.Module] = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*mods)
