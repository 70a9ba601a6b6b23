"""Every collective call of a run matched across the ranks of its process group: who was last,
how long the others waited, and which ranks make the others wait.

A *call* on one rank is a communication kernel (:data:`~distlab.trace.patterns.COMM_PATTERNS`,
``scope="gpu"``: NCCL, RCCL, MSCCL, expert-parallel dispatch/combine, NVSHMEM) or, on a CPU-only
trace, a host-side transfer span (``scope="host"``: gloo's ``gloo:all_reduce`` on its
``pt_gloo_runloop`` thread). Its collective is named as :data:`distlab.vocabulary.COLLECTIVES`
names it (``"all_reduce"``, ``"all_gather"``, ``"all_to_all"``, ...; torch's ``_allgather_base``,
``allgather_into_tensor_coalesced`` and NCCL's ``AllGather`` read as ``"all_gather"``), or, for
point-to-point transfers, one of :data:`P2P` (``"send"``, ``"recv"``, ``"sendrecv"``: NCCL's
``SendRecv`` kernel); another name is kept lower-cased, and a kernel nothing names has None.

Its message (elements ``In msg nelems`` / ``Out msg nelems``, ``dtype``, ``Group size``,
``Process Group Name``) comes from, in this order, and :attr:`RankCall.size_source` says which:

- ``"own args"``: the args torch writes on the kernel itself;
- ``"own record_param_comms"``: the ``record_param_comms`` op that launched the kernel;
- ``"own args"`` also for gloo: the ``gloo:<collective>`` span's ``Input Dims`` and ``Input
  type`` (``record_shapes=True``; an all-gather's output is its input times the group);
- ``"own c10d op"`` (gloo, a span without dims): the ``c10d::`` op's ``Input Dims``;
- ``"own annotation"``: an NCCL kernel with no args of its own, from torch's ``nccl:<collective>``
  span around its launch (:mod:`distlab.trace.annotations`: ``Input Dims``, ``Input type``; its
  collective names the call where the kernel's name agrees; where they disagree, e.g. a
  ``SendRecv`` kernel under ``nccl:all_reduce``, no size is read and :attr:`RankCall.size_note`
  says why);
- ``"matched rank N"``: the same call (same process group and sequence number) on rank ``N``,
  where this rank's trace states no size and rank ``N``'s states it itself (the lowest such
  rank; its collective, dtype and group size are taken too where this rank has none);
- ``"none"``: no rank states it.

Matching: calls are grouped by process group (``Process Group Name``; "0" when the trace does
not say) and numbered on each rank in start order (or by torch's sequence number where the args
carry one); call ``k`` of group ``g`` on every rank is one collective. Ranks' clocks: ``ts +
baseTimeNanoseconds / 1000`` where every rank has ``baseTimeNanoseconds``, else ``ts`` (one host's
ranks share a clock; across hosts the skew enters every wait). Times are microseconds.

Per call: each rank's start and end; the last rank to start; each early rank's *wait* (last start
- its start); each rank's *transfer* time after the last peer arrived (end - last start, >= 0),
the part a bandwidth model can price. Per run: for each rank, the calls it was last in and the
wait it caused the others (sum over its calls of the other ranks' waits): the *stragglers* are
the ranks that caused at least half of all waiting, biggest first.

:func:`unclaimed_comm_kernels`: GPU kernels whose names suggest communication
(:func:`~distlab.trace.patterns.suggests_comm`) that no pattern claims, per name: how many and
how long, so a report lists them instead of a silent 0 % communication.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from distlab.trace.annotations import annotation_sizes
from distlab.trace.patterns import (
                                    HTA_MEMORY_KERNEL,
                                    STEP,
                                    CommPattern,
                                    comm_regex,
                                    library_of,
                                    suggests_comm,
)
from distlab.trace.torch_trace import RankTrace, Run
from distlab.vocabulary import COLLECTIVES, collective_name, dtype_bytes

__all__ = ["P2P", "CollectiveCall", "Collectives", "RankCall", "UnclaimedKernels",
           "canonical_collective", "clock_shift_us", "dtype_bytes", "match_collectives",
           "rank_calls", "unclaimed_comm_kernels"]

_KERNEL_COLLECTIVE = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)")
_GLOO = re.compile(r"gloo:(\w+)")
P2P: tuple[str, ...] = ("send", "recv", "sendrecv")
"""Point-to-point transfers: torch's ``send`` / ``recv`` and NCCL's ``SendRecv`` kernel (which
also runs torch's all-to-all, grouped sends and receives)."""
_TORCH_SUFFIX = re.compile(r"(?:_into)?(?:_tensor)?(?:_coalesced)?(?:_base)?$", re.IGNORECASE)


@dataclass
class RankCall:
    """One rank's side of a collective call, times in microseconds on the run's clock.

    ``nelems`` / ``out_nelems``: the elements torch states going in and out (``In msg nelems``,
    ``Out msg nelems``); ``size_source``: where they (and ``dtype``) came from (module
    docstring: ``"own args"``, ``"own record_param_comms"``, ``"own c10d op"``,
    ``"matched rank N"`` or ``"none"``)."""

    rank: int
    group: str
    seq: int
    collective: str | None
    nelems: int | None
    dtype: str | None
    group_size: int | None
    start_us: float
    end_us: float
    name: str
    library: str
    step: int | None
    out_nelems: int | None = None
    size_source: str = "none"
    size_note: str | None = None

    @property
    def nbytes(self) -> int | None:
        """NCCL's ``nBytes`` of the call, bytes: the larger of the elements in and out times the
        dtype's bytes (an all-gather's gathered output, a reduce-scatter's whole input, the
        buffer of the others); None where the size or the dtype is unknown."""
        b = dtype_bytes(self.dtype)
        counts = [n for n in (self.nelems, self.out_nelems) if n is not None]
        return None if b is None or not counts else max(counts) * b


@dataclass
class CollectiveCall:
    """Call ``seq`` of ``group`` on every rank that has it."""

    group: str
    seq: int
    calls: dict[int, RankCall]

    @property
    def last_rank(self) -> int:
        return max(self.calls, key=lambda r: (self.calls[r].start_us, r))

    @property
    def last_start_us(self) -> float:
        return max(c.start_us for c in self.calls.values())

    def wait_us(self, rank: int) -> float:
        """How long ``rank`` waited for the last peer (0 for the last)."""
        return self.last_start_us - self.calls[rank].start_us

    def transfer_us(self, rank: int) -> float:
        """``rank``'s time after the last peer arrived (end - last start, >= 0)."""
        return max(0.0, self.calls[rank].end_us - self.last_start_us)

    @property
    def caused_us(self) -> float:
        """The other ranks' total wait for the last one."""
        return sum(self.wait_us(r) for r in self.calls)


@dataclass
class Collectives:
    """A run's matched calls and who made whom wait."""

    calls: list[CollectiveCall]
    notes: list[str] = field(default_factory=list)

    def last_counts(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for c in self.multi_rank():
            out[c.last_rank] = out.get(c.last_rank, 0) + 1
        return out

    def caused_us(self) -> dict[int, float]:
        """Per rank: the wait it caused the others, summed over the calls it was last in."""
        out: dict[int, float] = {}
        for c in self.multi_rank():
            out[c.last_rank] = out.get(c.last_rank, 0.0) + c.caused_us
        return out

    def waited_us(self) -> dict[int, float]:
        out: dict[int, float] = {}
        for c in self.multi_rank():
            for r in c.calls:
                out[r] = out.get(r, 0.0) + c.wait_us(r)
        return out

    def multi_rank(self) -> list[CollectiveCall]:
        return [c for c in self.calls if len(c.calls) > 1]

    @property
    def total_wait_us(self) -> float:
        return sum(c.caused_us for c in self.multi_rank())

    def stragglers(self, share: float = 0.5) -> list[int]:
        """Ranks, biggest first, that together caused at least ``share`` of all waiting, each
        causing more than an even share (1 / ranks) of it."""
        caused = self.caused_us()
        total = sum(caused.values())
        if total <= 0:
            return []
        nranks = len({r for c in self.calls for r in c.calls})
        out, acc = [], 0.0
        for r, v in sorted(caused.items(), key=lambda kv: -kv[1]):
            if acc >= share * total or v <= total / max(nranks, 1):
                break
            out.append(r)
            acc += v
        return out


def clock_shift_us(run: Run) -> dict[int, float]:
    """Per rank, what to add to its ``ts`` to put it on the run's clock (module docstring)."""
    if all(rt.base_time_ns is not None for rt in run.ranks.values()):
        b0 = min(int(rt.base_time_ns) for rt in run.ranks.values())  # type: ignore[arg-type]
        return {r: (int(rt.base_time_ns) - b0) / 1000.0  # type: ignore[arg-type]
                for r, rt in run.ranks.items()}
    return {r: 0.0 for r in run.ranks}


def canonical_collective(name: Any) -> str | None:
    """``name`` as :func:`distlab.vocabulary.collective_name` spells it (torch's suffixes
    ``_base``, ``_coalesced``, ``_into_tensor`` dropped first where needed), one of :data:`P2P`
    (``Send``, ``recvAnysource``, ``SendRecv``), else lower-cased; None for None or ``""``."""
    if name is None or str(name).strip() == "":
        return None
    text = str(name).strip()
    for candidate in (text, _TORCH_SUFFIX.sub("", text)):
        try:
            return collective_name(candidate)
        except ValueError:
            pass
    squashed = re.sub(r"[\s_-]", "", text).lower()
    if squashed in P2P:
        return squashed
    if squashed.startswith("recv"):
        return "recv"
    return text.lower()


def _int(v: Any) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _steps_of(rt: RankTrace, ts: np.ndarray) -> list[int | None]:
    wins = []
    for c, nm in enumerate(rt.names):
        m = STEP.match(nm)
        if m:
            for i in np.flatnonzero((rt.name == c) & ~np.isnan(rt.dur)):
                wins.append((rt.ts[i], rt.ts[i] + rt.dur[i], int(m.group(1))))
    out: list[int | None] = []
    for t in ts:
        hit = [n for s, e, n in wins if s <= t < e]
        out.append(hit[0] if hit else None)
    return out


def rank_calls(rt: RankTrace, comm: list[CommPattern] | None = None,
               shift_us: float = 0.0) -> list[RankCall]:
    """One rank's collective calls in start order (see the module docstring)."""
    gpu_rx, host_rx = comm_regex(comm, "gpu"), comm_regex(comm, "host")
    complete = ~np.isnan(rt.dur) & ~np.isnan(rt.ts)
    gpu = complete & (rt.stream >= 0) & rt.mask_names(gpu_rx)
    use_host = not gpu.any()
    sel = complete & rt.mask_names(host_rx) if use_host else gpu
    idx = np.flatnonzero(sel)
    idx = idx[np.argsort(rt.ts[idx], kind="stable")]
    # launchers' record_param_comms, for kernels without args
    rpc = [i for i, a in rt.args.items() if rt.names[rt.name[i]] == "record_param_comms"]
    rpc_ts = np.array([rt.ts[i] for i in rpc]) if rpc else np.zeros(0)
    rpc_end = rpc_ts + np.array([rt.dur[i] for i in rpc]) if rpc else np.zeros(0)
    launch_ts: dict[int, float] = {}
    if not use_host and any(i not in rt.args for i in idx):
        corr = rt.correlation
        runtime = np.flatnonzero(complete & (rt.stream < 0) & (corr >= 0))
        by_corr = dict(zip(corr[runtime].tolist(), rt.ts[runtime].tolist(), strict=True))
        launch_ts = {int(i): by_corr.get(int(corr[i]), np.nan) for i in idx}
    c10d = [i for i, a in sorted(rt.args.items()) if rt.names[rt.name[i]].startswith("c10d::")
            and "Input Dims" in a]
    steps = _steps_of(rt, rt.ts[idx])
    spans = {} if use_host else annotation_sizes(rt, idx)
    seqs: dict[str, int] = {}
    out: list[RankCall] = []
    for k, i in enumerate(idx):
        name = rt.names[rt.name[i]]
        a: dict[str, Any] = rt.args.get(int(i), {})
        source = "own args"
        if not a and launch_ts and len(rpc):
            t = launch_ts.get(int(i), np.nan)
            inside = np.flatnonzero((rpc_ts <= t) & (t <= rpc_end))
            if len(inside):
                a = rt.args[rpc[int(inside[np.argmax(rpc_ts[inside])])]]
                source = "own record_param_comms"
        coll = canonical_collective(a.get("Collective name"))
        nelems = _int(a.get("In msg nelems"))
        out_nelems = _int(a.get("Out msg nelems"))
        if coll is None:
            m = (_GLOO.match(name) if use_host else _KERNEL_COLLECTIVE.match(name))
            coll = canonical_collective(m.group(1)) if m else None
            if coll not in (*COLLECTIVES, *P2P):
                coll = None  # NCCL's ncclDevKernel_Generic: a name, not a collective
        dtype = a.get("dtype")
        size_note = None
        span = spans.get(int(i)) if not a else None
        if span is not None:
            named = canonical_collective(span.collective)
            if _same_kind(coll, named):
                coll, nelems, dtype, source = named, span.nelems, span.dtype, "own annotation"
                if nelems is not None and coll == collective_name("all_gather"):
                    out_nelems = nelems * rt.world_size if rt.world_size else None
            else:
                size_note = (f"annotation nccl:{span.collective} around an NCCL {coll} kernel: "
                             "the two disagree, so no size is read")
        elif spans and not a and source != "own record_param_comms":
            size_note = ("no nccl: annotation span around this kernel's launch (the launch is "
                         "not in the trace, or ran outside a span): no size is read")
        if use_host and nelems is None:
            nelems, dtype = _gloo_span_size(a)
            if nelems is not None and coll == collective_name("all_gather"):
                out_nelems = nelems * (_int(a.get("Group size")) or rt.world_size)
        if use_host and nelems is None and k < len(c10d):
            dims = rt.args[c10d[k]].get("Input Dims") or []
            first = dims[0] if dims else []
            if first and isinstance(first[0], list):
                nelems = int(sum(int(np.prod(d)) for d in first))
                source = "own c10d op"
        if (nelems is None and out_nelems is None) or \
                (not use_host and dtype_bytes(dtype) is None):
            source = "none"  # no bytes here: a matched rank's may stand in
        group = str(a.get("Process Group Name", "0"))
        seq = _int(a.get("Seq", a.get("seq")))
        if seq is None:
            seq = seqs.get(group, 0)
            seqs[group] = seq + 1
        lib = "gloo" if use_host else (library_of(name, comm) or "?")
        out.append(RankCall(rt.rank, group, seq, coll, nelems, dtype,
                            _int(a.get("Group size")) or rt.world_size, float(rt.ts[i]) + shift_us,
                            float(rt.ts[i] + rt.dur[i]) + shift_us, name, lib, steps[k],
                            out_nelems, source, size_note))
    return out


def _gloo_span_size(args: dict[str, Any]) -> tuple[int | None, str | None]:
    """A ``gloo:<collective>`` span's own elements and dtype (``record_shapes=True``: its
    ``Input Dims`` of the one tensor it moves, ``Input type`` such as ``"float"``); (None, None)
    where it states no dims."""
    dims = args.get("Input Dims") or []
    types = args.get("Input type") or []
    first = dims[0] if dims else None
    if not first or not all(isinstance(d, int) for d in first):
        return None, None
    dtype = types[0] if types and dtype_bytes(types[0]) is not None else None
    return int(np.prod(first)), dtype


def _same_kind(a: str | None, b: str | None) -> bool:
    """Can one rank's call of ``a`` take its size from a peer's call of ``b``: either unnamed,
    the same, or both point-to-point / all-to-all (a ``SendRecv`` kernel runs all three)."""
    kin = (*P2P, collective_name("all_to_all"))
    return a is None or b is None or a == b or (a in kin and b in kin)


def _borrow_sizes(calls: dict[int, RankCall]) -> None:
    """Where a rank states no size, take it from the lowest rank of the same call that states
    its own (see the module docstring); in place."""
    own = [c for _, c in sorted(calls.items()) if c.size_source.startswith("own")
           and c.nbytes is not None]
    for c in calls.values():
        if c.size_source != "none" or (c.size_note or "").startswith("annotation"):
            continue  # a span that disagrees with its kernel: a peer's size would not fit
        peer = next((o for o in own if _same_kind(c.collective, o.collective)), None)
        if peer is None:
            continue
        c.nelems, c.out_nelems, c.dtype = peer.nelems, peer.out_nelems, peer.dtype
        if c.collective is None or (c.collective == "sendrecv" and peer.collective not in P2P):
            c.collective = peer.collective  # the kernel's name said less than the peer's args
        c.group_size = peer.group_size or c.group_size
        c.size_source = f"matched rank {peer.rank}"
        c.size_note = None


def match_collectives(run: Run, comm: list[CommPattern] | None = None) -> Collectives:
    """Every rank's calls matched by (group, sequence); see the module docstring."""
    shift = clock_shift_us(run)
    table: dict[tuple[str, int], dict[int, RankCall]] = {}
    for r, rt in run.ranks.items():
        for c in rank_calls(rt, comm, shift[r]):
            table.setdefault((c.group, c.seq), {})[r] = c
    notes = []
    if not all(rt.base_time_ns is not None for rt in run.ranks.values()):
        notes.append("no baseTimeNanoseconds on every rank: ranks' ts compared as written "
                     "(right on one host)")
    counts = {r: sum(1 for k in table.values() if r in k) for r in run.ranks}
    if len(set(counts.values())) > 1:
        notes.append(f"ranks hold different numbers of collective calls {counts}: calls beyond "
                     "the shortest are matched only among the ranks that have them")
    for c in table.values():
        _borrow_sizes(c)
    calls = [CollectiveCall(g, s, dict(sorted(c.items()))) for (g, s), c in sorted(table.items())]
    return Collectives(calls, notes)


@dataclass
class UnclaimedKernels:
    """GPU kernels of one name that suggest communication but no pattern claims: ``count``
    kernels, ``total_us`` microseconds of kernel time, on ``ranks``."""

    name: str
    count: int
    total_us: float
    ranks: list[int]


def unclaimed_comm_kernels(rt: RankTrace, comm: list[CommPattern] | None = None
                           ) -> list[UnclaimedKernels]:
    """One rank's GPU kernels whose names suggest communication
    (:func:`~distlab.trace.patterns.suggests_comm`) but match no GPU pattern of ``comm`` (default
    :data:`~distlab.trace.patterns.COMM_PATTERNS`) nor HTA's rule, memory copies left out;
    per name, longest total first."""
    claimed = comm_regex(comm, "gpu")
    suspect = np.array([suggests_comm(n) and claimed.match(n) is None
                        and HTA_MEMORY_KERNEL.match(n) is None for n in rt.names], dtype=bool)
    if not len(rt.names) or not suspect.any():
        return []
    sel = suspect[rt.name] & (rt.stream >= 0) & ~np.isnan(rt.dur) & ~np.isnan(rt.ts)
    out: list[UnclaimedKernels] = []
    for code in np.unique(rt.name[sel]):
        m = sel & (rt.name == code)
        out.append(UnclaimedKernels(rt.names[int(code)], int(m.sum()), float(rt.dur[m].sum()),
                                    [rt.rank]))
    return sorted(out, key=lambda u: (-u.total_us, u.name))
