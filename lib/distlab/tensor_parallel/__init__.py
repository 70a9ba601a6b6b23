"""Tensor and sequence parallelism on real ranks: Megatron's column and row split.

- :mod:`~distlab.tensor_parallel.mesh`: :func:`init_mesh`, a named mesh of the default group's
  ranks and each dimension's process group (TP, DP and PP compositions share it: TP x DP with
  :class:`~distlab.ddp.DDP` on the ``"dp"`` group; TP x PP with each pipeline stage split over
  the ``"tp"`` group and :class:`~distlab.pipeline_parallel.PipelineStage` given the ``"pp"``
  group, see :mod:`distlab.pipeline_parallel.runtime.stage`); :func:`check_mesh_shape` and
  :func:`mesh_groups`, the same layout with no process group (checks before any rank starts);
  :func:`tp_group_of`, the group of a mesh, distlab's or torch's (``mesh["tp"]``), so every
  call that takes distlab's mesh takes torch's.
- :mod:`~distlab.tensor_parallel.comm`: tensor parallelism's f and f_bar and sequence
  parallelism's g and g_bar (the gather and reduce-scatter) as autograd Functions over a
  :class:`TPComm` (collectives counted per kind, optionally traced on a
  :class:`~distlab.timeline.Timeline`).
- :mod:`~distlab.tensor_parallel.style` and :mod:`~distlab.tensor_parallel.parallelize`: torch's
  ``ColwiseParallel``, ``RowwiseParallel``, ``SequenceParallel``, ``PrepareModuleInput`` and
  ``parallelize_module`` (``head_counts=``: an attention split by heads), on plain local
  tensors; :func:`check_plan`, its checks (sizes divisible by the TP degree) before any rank
  starts.
- :mod:`~distlab.tensor_parallel.loss`: :func:`loss_parallel_cross_entropy`, cross entropy of
  logits sharded on the vocabulary (last) dimension.
- :mod:`~distlab.tensor_parallel.cost` (pure): a transformer layer's collectives (f and f_bar,
  or g and g_bar with sequence parallelism), priced by the gloo calibration here or NCCL's
  model for a named box, inside one node or across nodes;
  :mod:`~distlab.tensor_parallel.memory` (pure): activation bytes per layer per rank
  (Korthikanti et al. 2022), term by term and as Table 2's closed forms. Both take a layer as a
  :class:`~distlab.transformer.ModelSpec` with its micro-batch and bytes per element.

Importing the package imports no torch (the planner reads the pure :mod:`.cost` and
:mod:`.memory` through it): each name below is imported from its module, with torch, when first
read.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "comm": ("TPComm", "copy_to_tp_region", "gather_from_sp_region", "gather_from_tp_region",
             "reduce_from_tp_region", "reduce_scatter_to_sp", "split_to_tp_region"),
    "loss": ("loss_parallel_cross_entropy",),
    "mesh": ("DeviceMesh", "check_mesh_shape", "init_mesh", "mesh_groups", "tp_group_of"),
    "parallelize": ("check_plan", "parallelize_module", "resolve_head_counts", "resolve_plan"),
    "style": ("ColwiseParallel", "ParallelStyle", "Placement", "PrepareModuleInput", "Replicate",
              "RowwiseParallel", "SequenceParallel", "Shard"),
}
_MODULE_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    """A public name of the package, imported from its module on first use."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
