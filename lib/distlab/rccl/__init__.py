"""RCCL, the collective library of ROCm builds of torch (the ``nccl`` backend on AMD GPUs): what
it runs for an allreduce on MI300X / MI325X nodes, read from its source per release.

Floor 1 (beside the labs and :mod:`distlab.nccl`): pure functions, nothing measured.

- :mod:`.tables`: RCCL's gfx942 tuning tables per release (2.20.5, 2.21.5, 2.26.6, and the
  releases that carry them), and how any release or ROCm version resolves to one.
- :mod:`.choice`: the choice size by size (MSCCL, the cost model, the protocol override), with
  RCCL's own estimate beside it.

What is not here yet (issue 59): the time a run takes (RCCL's estimate steers the choice and is
far from it; docs/rccl-research.md), gfx950 (MI355X), other collectives, the boxes' networks.
"""

from distlab.rccl.choice import RcclCandidate, RcclChoice, rccl_allreduce_choices
from distlab.rccl.tables import RCCL_TABLES, RcclTables, resolve_release

__all__ = ["RCCL_TABLES", "RcclCandidate", "RcclChoice", "RcclTables",
           "rccl_allreduce_choices", "resolve_release"]
