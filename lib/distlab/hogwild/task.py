"""A seeded regression task and the small MLP that learns it (the same in every process).

Inputs ``x ~ N(0, I)`` of ``dim`` features; targets ``y = tanh(x W) v + noise`` from a fixed
random *teacher* (``W``: ``dim x teacher_hidden``, ``v``: ``teacher_hidden``); the student is
``Linear(dim, hidden) -> Tanh -> Linear(hidden, 1)``, trained on mean squared error. Every tensor
comes from a ``torch.Generator`` seeded from :attr:`Task.seed`, so any process rebuilds the same
teacher, the same initial student and the same evaluation set; a worker's batches come from its
own stream (``seed``, ``stream``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from distlab._checks import check_float, check_int

__all__ = ["Task"]


@dataclass(frozen=True)
class Task:
    """The task's sizes and seed (see the module docstring)."""

    dim: int = 32
    hidden: int = 256
    teacher_hidden: int = 16
    noise: float = 0.05
    eval_samples: int = 4096
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("dim", "hidden", "teacher_hidden", "eval_samples"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("seed", self.seed, minimum=0)
        check_float("noise", self.noise, minimum=0.0)

    def _gen(self, stream: int) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed * 1_000_003 + stream)

    def teacher(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(W, v)`` of the teacher (stream 0)."""
        g = self._gen(0)
        w = torch.randn(self.dim, self.teacher_hidden, generator=g) / self.dim ** 0.5
        v = torch.randn(self.teacher_hidden, generator=g)
        return w, v

    def batch(self, n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` samples ``(x, y)`` drawn with ``generator``; ``y`` has shape ``(n, 1)``."""
        w, v = self.teacher()
        x = torch.randn(n, self.dim, generator=generator)
        y = torch.tanh(x @ w) @ v + self.noise * torch.randn(n, generator=generator)
        return x, y.unsqueeze(1)

    def stream(self, index: int) -> torch.Generator:
        """The generator of batch stream ``index`` (>= 0; worker ``k`` of a run draws from
        stream ``k``); streams never share a seed with the teacher, the evaluation set or the
        initial weights."""
        return self._gen(10 + check_int("index", index, minimum=0))

    def eval_set(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The evaluation samples (their own stream, the same in every process)."""
        return self.batch(self.eval_samples, self._gen(1))

    def model(self) -> nn.Module:
        """The student with its seeded initial weights."""
        with torch.random.fork_rng(devices=[]):   # the caller's global RNG is left alone
            torch.manual_seed(self.seed * 1_000_003 + 2)
            return nn.Sequential(nn.Linear(self.dim, self.hidden), nn.Tanh(),
                                 nn.Linear(self.hidden, 1))

    def eval_loss(self, model: nn.Module) -> float:
        """Mean squared error of ``model`` on :meth:`eval_set`."""
        x, y = self.eval_set()
        with torch.no_grad():
            return float(nn.functional.mse_loss(model(x), y))
