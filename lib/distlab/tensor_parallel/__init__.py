"""Tensor and sequence parallelism on real ranks: Megatron's column and row split.

- :mod:`~distlab.tensor_parallel.mesh`: :func:`init_mesh`, a named mesh of the default group's
  ranks and each dimension's process group (TP, DP and PP compositions share it: TP x DP with
  :class:`~distlab.ddp.DDP` on the ``"dp"`` group; TP x PP with each pipeline stage split over
  the ``"tp"`` group and :class:`~distlab.pipeline_parallel.PipelineStage` given the ``"pp"``
  group, see :mod:`distlab.pipeline_parallel.runtime.stage`); :func:`check_mesh_shape` and
  :func:`mesh_groups`, the same layout with no process group (checks before any rank starts);
  :func:`tp_group_of`, the group of a mesh, distlab's or torch's (``mesh["tp"]``), so every
  call that takes distlab's mesh takes torch's.
- :mod:`~distlab.tensor_parallel.comm`: Megatron's f and g and sequence parallelism's gather and
  reduce-scatter as autograd Functions over a :class:`TPComm` (collectives counted per kind,
  optionally traced on a :class:`~distlab.timeline.Timeline`).
- :mod:`~distlab.tensor_parallel.style` and :mod:`~distlab.tensor_parallel.parallelize`: torch's
  ``ColwiseParallel``, ``RowwiseParallel``, ``SequenceParallel``, ``PrepareModuleInput`` and
  ``parallelize_module`` (``head_counts=``: an attention split by heads), on plain local
  tensors; :func:`check_plan`, its checks (sizes divisible by the TP degree) before any rank
  starts.
- :mod:`~distlab.tensor_parallel.loss`: :func:`loss_parallel_cross_entropy`, cross entropy of
  logits sharded on the vocabulary (last) dimension.
- :mod:`~distlab.tensor_parallel.cost` (pure): a transformer layer's f/g collectives with and
  without sequence parallelism, priced by the gloo calibration here or NCCL's model for a named
  box, inside one node or across nodes; :mod:`~distlab.tensor_parallel.memory` (pure): activation
  bytes per layer per rank (Korthikanti et al. 2022), term by term and as Table 2's closed forms.
"""

from distlab.tensor_parallel.comm import (
    TPComm,
    copy_to_tp_region,
    gather_from_sp_region,
    gather_from_tp_region,
    reduce_from_tp_region,
    reduce_scatter_to_sp,
    split_to_tp_region,
)
from distlab.tensor_parallel.loss import loss_parallel_cross_entropy
from distlab.tensor_parallel.mesh import (
    DeviceMesh,
    check_mesh_shape,
    init_mesh,
    mesh_groups,
    tp_group_of,
)
from distlab.tensor_parallel.parallelize import (
    check_plan,
    parallelize_module,
    resolve_head_counts,
    resolve_plan,
)
from distlab.tensor_parallel.style import (
    ColwiseParallel,
    ParallelStyle,
    PrepareModuleInput,
    Replicate,
    RowwiseParallel,
    SequenceParallel,
    Shard,
)

__all__ = ["ColwiseParallel", "DeviceMesh", "ParallelStyle", "PrepareModuleInput", "Replicate",
           "RowwiseParallel", "SequenceParallel", "Shard", "TPComm", "check_mesh_shape",
           "check_plan", "copy_to_tp_region", "gather_from_sp_region", "gather_from_tp_region",
           "init_mesh", "loss_parallel_cross_entropy", "mesh_groups", "parallelize_module",
           "reduce_from_tp_region", "reduce_scatter_to_sp", "resolve_head_counts", "resolve_plan",
           "split_to_tp_region", "tp_group_of"]
