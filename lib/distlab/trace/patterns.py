"""Which events of a torch.profiler trace are communication, memory, data loading or a sync.

The lists are plain data a user extends (``COMM_PATTERNS.append(CommPattern(...))`` or pass
``comm=`` to the analysis): each entry is a regular expression matched (``re.match``, so anchored
at the name's start unless it begins with ``.*``) against an event's name.

GPU communication kernels (``scope="gpu"``; events with a CUDA/HIP stream):

- NCCL and RCCL: ``ncclKernel_AllReduce_RING_LL_Sum_float``, ``ncclDevKernel_Generic`` (HTA's own
  rule, ``^nccl.*Kernel``; RCCL keeps NCCL's kernel names);
- RCCL's own names: ``rccl...``, ``msccl...``;
- DeepEP: kernels whose name holds ``deep_ep`` and ``dispatch``/``combine``
  (``deep_ep::intranode::dispatch<...>``).

Host-side communication (``scope="host"``, CPU traces: gloo runs its collectives on its own
``pt_gloo_runloop`` threads, each call a ``gloo:all_reduce`` user annotation).

Where distlab's rule differs from HTA's on purpose: HTA calls only ``^nccl.*Kernel`` names
communication, so on a trace with DeepEP or ``rccl``/``msccl`` kernels HTA counts them as compute
and distlab as communication; on traces with NCCL kernels only the two agree (tests check it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["COMM_PATTERNS", "CommPattern", "DATA_LOADER", "HTA_COMM_KERNEL",
           "HTA_MEMORY_KERNEL", "HTA_NOT_COMPUTE", "STEP", "SYNC", "comm_regex"]


@dataclass(frozen=True)
class CommPattern:
    """``pattern`` (a regex, ``re.match``) marks events of ``library``; ``scope`` is ``"gpu"``
    (kernels on a stream) or ``"host"`` (CPU-side spans that are the transfer itself)."""

    pattern: str
    library: str
    scope: str = "gpu"


COMM_PATTERNS: list[CommPattern] = [
    CommPattern(r"nccl.*Kernel", "NCCL/RCCL"),
    CommPattern(r"(rccl|msccl)", "RCCL"),
    CommPattern(r".*deep_ep.*(dispatch|combine)", "DeepEP"),
    CommPattern(r"gloo:", "gloo", scope="host"),
]

HTA_COMM_KERNEL = re.compile(r"^nccl.*Kernel")
"""HTA 0.5.0's communication kernel rule."""
HTA_MEMORY_KERNEL = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
"""HTA 0.5.0's memory kernel rule."""
HTA_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
"""HTA 0.5.0: a GPU event is computation unless its name matches this."""
DATA_LOADER = re.compile(r"enumerate\(DataLoader\)")
"""torch's span around a DataLoader iterator's ``__next__``."""
SYNC = re.compile(r"cuda(Device|Stream|Event)Synchronize|hip(Device|Stream|Event)Synchronize")
"""Host calls that block until the GPU catches up."""
STEP = re.compile(r"ProfilerStep\s*#\s*(\d+)")
"""``prof.step()``'s span: ``ProfilerStep#N``."""


def comm_regex(patterns: list[CommPattern] | None = None, scope: str = "gpu") -> re.Pattern[str]:
    """One regex matching any of ``patterns`` (default :data:`COMM_PATTERNS`) of ``scope``."""
    pats = [p.pattern for p in (COMM_PATTERNS if patterns is None else patterns)
            if p.scope == scope]
    return re.compile("|".join(f"(?:{p})" for p in pats) if pats else r"(?!)")
