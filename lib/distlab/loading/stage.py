"""The Stage interface: one item in, the next item out, plus where it may run.

A stage turns one item into the next (``process(item) -> item``); items are batches. Every stage
says where it may run (``placement``): ``"worker"`` stages are pure CPU/IO work that a worker
process may do (like DataLoader workers); ``"host"`` stages must run in the trainer process
(pinning, host-to-device copies, the training step). A stage that cannot do its job on this
machine sets ``skipped`` to the reason and passes items through unchanged.
"""

from __future__ import annotations

from typing import Any

import torch

from distlab._checks import check_float

__all__ = ["PLACEMENTS", "Stage", "accelerator_available", "stage_cost"]

PLACEMENTS = ("worker", "host")


def accelerator_available() -> bool:
    """True when torch sees a CUDA device (pinning and H2D copies are real then)."""
    return bool(torch.cuda.is_available())


def stage_cost(name: str, value: Any) -> float:
    """``value`` as seconds: a finite number >= 0 (TypeError for non-numbers, ValueError else)."""
    return check_float(name, value, minimum=0.0)


class Stage:
    """Base class. Subclasses set ``name``/``category`` and implement ``process(item)``.

    Attributes:
        name: stage name; the lane and span name in timelines.
        category: colour group in the Gantt chart (``io``, ``cpu``, ``copy``, ``compute``).
        placement: ``"worker"`` (may run in a worker process) or ``"host"`` (trainer process).
        cost_s: nominal seconds per item for the model, or None when unknown.
        skipped: None, or why this stage passes items through unchanged on this machine.
    """

    name: str = ""
    category: str = "cpu"
    placement: str = "worker"
    cost_s: float | None = None
    skipped: str | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        missing = [m for m in ("process",) if getattr(cls, m) is getattr(Stage, m)]
        if missing and not getattr(cls, "__abstract_ok__", False):
            raise TypeError(f"Stage subclass {cls.__name__} must implement {missing} "
                            "(process(item) -> item)")

    def process(self, item: Any) -> Any:
        """Turn one item into the next. Subclasses implement this."""
        raise NotImplementedError

    def __call__(self, item: Any) -> Any:
        return self.process(item)

    def check(self) -> None:
        """Raise TypeError/ValueError if the stage's attributes break the contract."""
        if not isinstance(self.name, str) or not self.name or "/" in self.name:
            raise ValueError(f"stage name must be a non-empty str without '/', got {self.name!r}")
        if self.placement not in PLACEMENTS:
            raise ValueError(f"stage {self.name!r}: placement must be one of {PLACEMENTS}, "
                             f"got {self.placement!r}")

    def __repr__(self) -> str:
        extra = f", cost_s={self.cost_s:g}" if self.cost_s is not None else ""
        return f"{type(self).__name__}(name={self.name!r}{extra})"
