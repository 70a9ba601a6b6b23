"""Pipeline stages: one small interface and the built-in stages of a loading pipeline.

A stage turns one item into the next (``process(item) -> item``); items are batches. The chain
read -> decode -> collate -> pin -> h2d -> compute is the seed's storage -> pageable host memory ->
pinned host memory -> GPU pipeline with the training step at the end.

Every stage says where it may run (``placement``): ``"worker"`` stages are pure CPU/IO work that a
worker process may do (like DataLoader workers); ``"host"`` stages must run in the trainer process
(pinning, host-to-device copies, the training step). A stage that cannot do its job on this
machine (pinning or a CUDA copy without an accelerator) passes the item through unchanged and sets
``skipped`` to the reason; executors copy that reason into the Timeline's notes and span args.

User stages subclass :class:`Stage` and implement ``process``; or wrap a function with
:class:`FnStage`. Stages sent to worker processes must be picklable (module-level classes and
functions).

Modules: :mod:`.stage` (the interface), :mod:`.synthetic_stages` (sleep, burn, identity,
function), :mod:`.data_stages` (read, decode, collate), :mod:`.device_stages` (pin, h2d,
compute), :mod:`.cpuwork` (CPU work). This module gathers them under one name.
"""

from __future__ import annotations

from .cpuwork import burn, matmuls_per_second
from .data_stages import CollateStage, DecodeStage, ReadStage
from .device_stages import ComputeStage, H2DStage, PinStage
from .stage import PLACEMENTS, Stage, accelerator_available, stage_cost
from .synthetic_stages import BurnStage, FnStage, IdentityStage, SleepStage

__all__ = [
    "PLACEMENTS", "BurnStage", "CollateStage", "ComputeStage", "DecodeStage", "FnStage",
    "H2DStage", "IdentityStage", "PinStage", "ReadStage", "SleepStage", "Stage",
    "accelerator_available", "burn", "matmuls_per_second", "stage_cost",
]
