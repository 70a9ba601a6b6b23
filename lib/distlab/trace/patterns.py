"""Which events of a torch.profiler trace are communication, memory, data loading or a sync.

The lists are plain data a user extends (``COMM_PATTERNS.append(CommPattern(...))``, pass
``comm=`` to the analysis, or ``--comm-pattern REGEX`` to ``python -m distlab.judge trace``):
each entry is a regular expression matched (``re.match``, so anchored at the name's start unless
it begins with ``.*``) against an event's name.

GPU communication kernels (``scope="gpu"``; events with a CUDA/HIP stream), one library by
several names:

- NCCL and RCCL: ``ncclKernel_AllReduce_RING_LL_Sum_float``, ``ncclDevKernel_Generic`` (HTA's own
  rule, ``^nccl.*Kernel``; RCCL keeps NCCL's kernel names);
- RCCL's own names (``rccl...``) and MSCCL's (``mscclKernel_...``, MSCCL++ ``mscclpp...``);
- expert-parallel dispatch / combine / notify kernels: DeepEP (``deep_ep::intranode::dispatch``,
  ``deep_ep::internode::cached_notify``), any library's ``...::ep::...`` namespace
  (``dpsk::ep::internode::dispatch``, ``...::combine``, ``...::cached_notify``), pplx-kernels
  (``pplx::dispatchKernel``), and MoE all-to-all kernels named so (``moeA2ADispatchKernel``,
  ``..._alltoall_combine``);
- NVSHMEM's own kernels and kernels named after it (``nvshmemi_...``, ``nvshmemx_...``).

Host-side communication (``scope="host"``, CPU traces: gloo runs its collectives on its own
``pt_gloo_runloop`` threads, each call a ``gloo:all_reduce`` user annotation).

A GPU kernel no pattern claims but whose name suggests communication (:data:`POSSIBLE_COMM`:
dispatch, combine, notify, all-to-all, all-gather, reduce-scatter, all-reduce, send/recv,
nvshmem, p2p, comm, ...) is not counted as communication; the trace judge lists it so that a
user can claim it with a pattern of their own.

Where distlab's rule differs from HTA's on purpose: HTA calls only ``^nccl.*Kernel`` names
communication, so on a trace with DeepEP, expert-parallel, NVSHMEM or ``rccl``/``msccl`` kernels
HTA counts them as compute and distlab as communication; on traces with NCCL kernels only the two
agree (tests check it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["COMM_PATTERNS", "CommPattern", "DATA_LOADER", "HTA_COMM_KERNEL",
           "HTA_MEMORY_KERNEL", "HTA_NOT_COMPUTE", "POSSIBLE_COMM", "STEP", "SYNC", "USER_LIBRARY",
           "comm_regex", "library_of", "suggests_comm", "user_patterns"]


@dataclass(frozen=True)
class CommPattern:
    """``pattern`` (a regex, ``re.match``) marks events of ``library``; ``scope`` is ``"gpu"``
    (kernels on a stream) or ``"host"`` (CPU-side spans that are the transfer itself)."""

    pattern: str
    library: str
    scope: str = "gpu"


_EP_VERBS = r"(?:dispatch|combine|notify)"

COMM_PATTERNS: list[CommPattern] = [
    CommPattern(r"nccl.*Kernel", "NCCL/RCCL"),
    CommPattern(r"rccl", "RCCL"),
    CommPattern(r"msccl", "MSCCL"),
    CommPattern(rf".*deep_ep.*{_EP_VERBS}", "DeepEP"),
    CommPattern(rf".*\bep::.*{_EP_VERBS}", "expert-parallel (::ep::)"),
    CommPattern(r".*pplx.*(?:dispatch|combine)", "pplx-kernels"),
    CommPattern(r".*(?i:a2a|all_?to_?all).*(?i:dispatch|combine)", "MoE all-to-all"),
    CommPattern(r".*nvshmem", "NVSHMEM"),
    CommPattern(r"gloo:", "gloo", scope="host"),
]

USER_LIBRARY = "--comm-pattern"
"""The ``library`` of a pattern the user gave on the command line."""

POSSIBLE_COMM = re.compile(
    r".*(?i:dispatch|combine|notify|all_?to_?all|a2a|all_?gather|reduce_?scatter|all_?reduce"
    r"|send_?recv|nvshmem|p2p|userbuffers|cross_device|comm(?!on))")
"""Words in a GPU kernel's name that suggest communication (``re.match`` on the name before its
template arguments and parameters: :func:`suggests_comm`)."""

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


def suggests_comm(name: str) -> bool:
    """Does a kernel's own name suggest communication (:data:`POSSIBLE_COMM`)? Only the name
    before its first ``<`` or ``(`` is read, so ``cub::DeviceReduceByKeyKernel<
    cub::DispatchReduceByKey<...>>`` or a parameter ``ncclDevComm*`` does not count."""
    return POSSIBLE_COMM.match(re.split(r"[<(]", name, maxsplit=1)[0]) is not None


def comm_regex(patterns: list[CommPattern] | None = None, scope: str = "gpu") -> re.Pattern[str]:
    """One regex matching any of ``patterns`` (default :data:`COMM_PATTERNS`) of ``scope``."""
    pats = [p.pattern for p in (COMM_PATTERNS if patterns is None else patterns)
            if p.scope == scope]
    return re.compile("|".join(f"(?:{p})" for p in pats) if pats else r"(?!)")


def library_of(name: str, patterns: list[CommPattern] | None = None,
               scope: str = "gpu") -> str | None:
    """The library of the first of ``patterns`` (default :data:`COMM_PATTERNS`) of ``scope``
    that matches ``name``, or None."""
    return next((p.library for p in (COMM_PATTERNS if patterns is None else patterns)
                 if p.scope == scope and re.match(p.pattern, name)), None)


def user_patterns(regexes: Iterable[str], library: str = USER_LIBRARY) -> list[CommPattern]:
    """:data:`COMM_PATTERNS` followed by a GPU pattern for each of ``regexes`` (the user's own,
    ``re.match``); raises ``ValueError`` with one line naming a regex that does not compile."""
    out = list(COMM_PATTERNS)
    for rx in regexes:
        try:
            re.compile(rx)
        except re.error as exc:
            raise ValueError(f"invalid regex {rx!r}: {exc}") from None
        out.append(CommPattern(rx, library))
    return out
