"""RCCL, the collective library of ROCm builds of torch (the ``nccl`` backend on AMD GPUs): what
it runs for an allreduce on MI300X / MI325X nodes (and MI350X / MI355X), read from its source
per release.

Floor 1 (beside the labs and :mod:`distlab.nccl`): pure functions, nothing measured.

- :mod:`.tables`: RCCL's gfx942 tuning tables per release (2.20.5, 2.21.5, 2.26.6, and the
  releases that carry them), its gfx950 table (2.26.6, develop 6ade5065), and how any release
  or ROCm version resolves to one per architecture.
- :mod:`.tuning`: the choice size by size (MSCCL, the cost model, the protocol override), with
  RCCL's own estimate beside it (what RCCL minimizes; far from a run's time,
  docs/research/2026-11-27-rccl.md).
- :mod:`.execution`: the time of what RCCL runs (MSCCL's allpairs and the ring, on one node
  and across nodes, and the tree across nodes), its constants committed (fitted on published
  rccl-tests tables and judged on others in :mod:`distlab.evidence.rccl`; gfx950's one node at
  the gfx942 fit's xGMI rates scaled by the links' speeds); what it cannot price (LL rings
  across nodes) says so.
- :mod:`.boxes`: the MI300X / MI325X / MI355X boxes and the NICs beside them, each constant
  with its source (each box's published tables judged: :mod:`distlab.evidence.rccl.inventory`).
- :mod:`.library`: the model behind the one collective-library interface
  (:class:`distlab.collective_library.CollectiveLibrary`, :data:`~.library.RCCL`): what the
  planner asks to price an AMD box, the same types and units (seconds) as NCCL's
  (:mod:`distlab.nccl.library`).
- ``python -m distlab.rccl`` (:mod:`.__main__`): both, size by size (:mod:`.lines`), and
  ``--judge`` and ``--boxes`` (also ``python -m distlab.judge rccl``), the model's evidence
  (:mod:`distlab.evidence.rccl`).

Every public function checks its arguments as the command does: a release (an RCCL 2.x
release or ``rocm-X.Y``; a ROCm release without its prefix is refused, naming the form), a
dtype through :func:`distlab.vocabulary.dtype_name` (``"bf16"``, ``torch.bfloat16``), a NIC's
rate in GB/s through :func:`distlab.links.check_nic_gbps`.

Not modelled: collectives other than allreduce (the trace judge says so for each).
"""

from distlab.rccl.execution import RcclTime, rccl_allreduce_times
from distlab.rccl.tables import RCCL_TABLES, RcclTables, resolve_release
from distlab.rccl.tuning import RcclCandidate, RcclChoice, rccl_allreduce_choices

__all__ = ["RCCL_TABLES", "RcclCandidate", "RcclChoice", "RcclTables", "RcclTime",
           "rccl_allreduce_choices", "rccl_allreduce_times", "resolve_release"]
