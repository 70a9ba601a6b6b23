"""What RCCL runs for an allreduce on 8-GPU gfx942 nodes (MI300X, MI325X) or gfx950 nodes (MI350X,
MI355X), size by size.

RCCL decides in three places, in this order (ROCm/rccl ``src/collectives.cc``,
``src/enqueue.cc``, ``src/rccl_wrap.cc``; :mod:`.tables` names the releases):

1. **MSCCL** (one node, out of place): an allreduce up to
   :attr:`~.tables.RcclTables.msccl_max_bytes` runs one of MSCCL's installed ``allpairs``
   algorithms (every GPU exchanges with all seven others directly), ahead of the cost model
   (``mscclEnabled`` of the one-node topology; from 2.26.6 a bf16 allreduce above 8 MiB skips
   it). ``msccl=False`` is ``RCCL_MSCCL_ENABLE=0``.
2. **The cost model** (``ncclTopoTuneModel`` and ``ncclTopoGetAlgoTime``): for Tree and Ring
   with LL, LL128 and Simple, ``time_us = latency_us + nbytes / (1000 * algbw)`` and the
   cheapest runs (ties to the first: Tree before Ring, LL before LL128 before Simple). The bus
   bandwidth is the GPU's seven xGMI links at RCCL's 48 GB/s (336 GB/s: the one-node and the
   rail topology both give it, whatever the NIC) times the release's ``bwRatio``; a ring's
   algorithm bandwidth is ``n / 2(n-1)`` of it, a tree's half; trees take their size's
   correction factor always, rings only across nodes. Latency: ``baseLat`` plus, for a ring,
   ``(2(n-1) - 2 nodes) * max(xgmi, net overhead) + 2 nodes * net`` (net overhead 2 us on an AMD
   host, 3x for Simple, across nodes only), for a tree ``2 ((n/nodes - 1) xgmi + log2(nodes)
   net)``. One node never runs Tree/Simple; LL128 runs only across nodes and only from
   2.26.6.
3. **The protocol override** (2.26.6 on, two nodes or more): the algorithm stays, the protocol
   becomes LL up to 1 MiB, LL128 up to 9 MiB (x 3.8 beyond two nodes), Simple above (gfx950's
   table 6: LL up to 128 KiB - 1, LL128 up to 16.8 MiB).

This is RCCL's *choice*, and its own estimate beside it (:attr:`RcclChoice.estimate_us`,
``None`` under MSCCL, which the cost model never prices). The estimate steers the choice and is
not a run's time (docs/research/2026-11-27-rccl.md: on 2 x 8 MI300X it says 52 us for 64 KiB
where a run took 241 us): :mod:`.execution` times what it runs.

gfx950 (``arch="gfx950"``) reads the same code with RCCL's table 6 (:mod:`.tables`): the same
latencies and bandwidth ratios, its own correction factors and protocol ranges, the same 48 GB/s
per xGMI link (``GFX95X_XGMI_WIDTH``), LL128 across nodes (``rome_model_81`` sets
``ll128Enabled``; gfx950 is in RCCL's LL128 arch list), MSCCL's allpairs on one node and the bf16
rule as gfx942's 2.26.6.

Scope: allreduce, whole 8-GPU nodes (one, or several with one NIC per GPU), gfx942 or gfx950;
the topology is taken to match RCCL's own (``rome_model_79`` / ``_81``: table 5 on gfx942, 6 on
gfx950).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from distlab._checks import check_bool, check_int, check_sizes
from distlab.rccl.tables import DEFAULT_ARCH, RcclTables, check_arch, resolve_release
from distlab.vocabulary import dtype_name

__all__ = ["GPUS_PER_NODE", "RCCL_XGMI_LINK_GBPS", "RcclCandidate", "RcclChoice",
           "XGMI_BUS_GBPS", "XGMI_LINK_SPEC_GBPS", "rccl_allreduce_choices", "tree_latency_us"]

GPUS_PER_NODE = 8
"""Every gfx942 / gfx950 box RCCL's topology models describe: eight GPUs, fully connected by
xGMI."""
XGMI_LINK_GBPS = 48.0
"""RCCL's speed of one gfx942 xGMI link (``GFX94X_XGMI_WIDTH``, ``src/graph/topo.h``), GB/s; the
same for gfx950 (``GFX95X_XGMI_WIDTH``, 48.0 at 6ade5065: :data:`RCCL_XGMI_LINK_GBPS`)."""
RCCL_XGMI_LINK_GBPS: dict[str, float] = {"gfx942": XGMI_LINK_GBPS, "gfx950": 48.0}
"""RCCL's credit of one xGMI link per architecture (``ncclTopoXGMISpeed``), GB/s."""
XGMI_LINK_SPEC_GBPS: dict[str, float] = {"gfx942": 64.0, "gfx950": 76.8}
"""One xGMI link's speed each way per architecture, GB/s: gfx942 (MI300X, MI325X) from AMD's
128 GB/s bidirectional per link; gfx950 (MI350X, MI355X) from Hot Chips 2025 write-ups'
153.6 GB/s bidirectional (third-party, not AMD's datasheet). :mod:`distlab.rccl.boxes` cites
each; :mod:`distlab.rccl.execution` scales the one-node rates fitted on gfx942 by their ratio."""
XGMI_BUS_GBPS = (GPUS_PER_NODE - 1) * XGMI_LINK_GBPS
"""Bus bandwidth of the cost model on both topologies: seven links per GPU, GB/s."""
NET_OVERHEAD_US = 2.0
"""``getNetOverhead`` on an AMD (x86) host, us; 1.0 on an Intel one (``amd_host=False``)."""

_ALGORITHMS = ("tree", "ring")
_PROTOCOLS = ("LL", "LL128", "Simple")


@dataclass(frozen=True)
class RcclCandidate:
    """One (algorithm, protocol) of the cost model at one size: RCCL's latency, its algorithm
    bandwidth after the size's correction (GB/s), and its estimate ``time_us``."""

    algorithm: str
    protocol: str
    latency_us: float
    algbw_gbps: float
    time_us: float


@dataclass(frozen=True)
class RcclChoice:
    """What RCCL runs for one allreduce size.

    Attributes:
        nbytes, nodes: the size and the number of 8-GPU nodes.
        path: ``"msccl"``, ``"cost model"`` or ``"cost model + protocol override"``.
        algorithm, protocol: what runs (``"allpairs"`` and MSCCL's protocol under MSCCL).
        estimate_us: RCCL's own estimate of the pair that runs; ``None`` under MSCCL.
        candidates: every enabled pair of the cost model at this size, in RCCL's order.
        arch: the GPU architecture whose tables chose it.
    """

    nbytes: int
    nodes: int
    path: str
    algorithm: str
    protocol: str
    estimate_us: float | None
    candidates: tuple[RcclCandidate, ...]
    arch: str = DEFAULT_ARCH


def _protocol_index(protocol: str) -> int:
    return _PROTOCOLS.index(protocol)


def _enabled(t: RcclTables, nodes: int, algorithm: str, protocol: str) -> bool:
    if nodes == 1 and algorithm == "tree" and protocol == "Simple":
        return False    # gfx942/gfx950: Tree/Simple skipped when every rank is on one node
    if protocol == "LL128":
        return nodes > 1 and t.ll128_multinode
    return True


def _latency_us(t: RcclTables, nodes: int, n: int, algorithm: str, p: int,
                net_overhead_us: float) -> float:
    intra = t.xgmi_lat_us[algorithm][p]
    inter = t.net_lat_us[algorithm][p]
    if algorithm == "ring":
        steps, inter_steps = 2 * (n - 1), (2 * nodes if nodes > 1 else 0)
        overhead = (net_overhead_us * (3 if _PROTOCOLS[p] == "Simple" else 1)
                    if nodes > 1 else 0.0)
        intra = max(intra, overhead)
        return t.base_lat_us[p] + (steps - inter_steps) * intra + inter_steps * inter
    return t.base_lat_us[p] + 2 * ((n // nodes - 1) * intra
                                   + int(math.log2(nodes)) * inter)


def tree_latency_us(nodes: int, protocol: str, *, release: str | None = None,
                    arch: str = DEFAULT_ARCH) -> float:
    """RCCL's latency of its tree over ``nodes`` 8-GPU nodes in ``protocol`` (us): ``baseLat +
    2 ((8 - 1) hwLat[xGMI] + log2(nodes) hwLat[NET])`` from the release's table (its estimate's
    fixed term, not a run's time).

    Raises:
        ValueError: ``nodes`` below 1, a protocol other than LL, LL128 and Simple, or a release
            or architecture :func:`~.tables.resolve_release` refuses.
    """
    check_int("nodes", nodes, minimum=1)
    if protocol not in _PROTOCOLS:
        raise ValueError(f"protocol must be one of {', '.join(_PROTOCOLS)}, got {protocol!r}")
    t = resolve_release(release, check_arch(arch)).tables
    return _latency_us(t, nodes, nodes * GPUS_PER_NODE, "tree", _protocol_index(protocol),
                       NET_OVERHEAD_US)


def _log_size(nbytes: int) -> int:
    shifted = nbytes >> 6
    return min(26, shifted.bit_length() - 1 if shifted else 0)


def _candidate(t: RcclTables, nodes: int, nbytes: int, algorithm: str, protocol: str,
               net_overhead_us: float) -> RcclCandidate:
    n, p = nodes * GPUS_PER_NODE, _protocol_index(protocol)
    links = (GPUS_PER_NODE - 1) * RCCL_XGMI_LINK_GBPS[t.arch]
    bus = links * t.bw_ratio[0 if nodes <= 2 else 1][algorithm][p]
    alg = bus * (n / (2 * (n - 1)) if algorithm == "ring" else 0.5)
    if algorithm == "tree":
        alg *= t.tree_correction[p][_log_size(nbytes)]
    elif nodes > 1:
        alg *= t.ring_correction[p][_log_size(nbytes)]
    lat = _latency_us(t, nodes, n, algorithm, p, net_overhead_us)
    time = lat + nbytes / (1000 * alg) if alg > 0 else math.inf
    return RcclCandidate(algorithm, protocol, lat, alg, time)


MSCCL_SIMPLE_FROM = 524288
"""MSCCL's installed ``allreduce-allpairs`` algorithms (``tools/msccl-algorithms``) run LL below
512 KiB (on 4 then 8 channels) and Simple from it, in every release held."""


def _msccl_protocol(nbytes: int) -> str:
    return "LL" if nbytes < MSCCL_SIMPLE_FROM else "Simple"


def _protocol_override(t: RcclTables, nodes: int, nbytes: int) -> str | None:
    if nodes < 2 or t.ll_max_bytes is None or t.ll128_max_bytes is None:
        return None
    if nbytes <= t.ll_max_bytes:
        return "LL"
    ll128_max = t.ll128_max_bytes * (3.8 if nodes > 2 else 1.0)
    if t.ll128_multinode and nbytes <= ll128_max:
        return "LL128"
    return "Simple"


def rccl_allreduce_choices(nodes: int, sizes_bytes: Sequence[int], *,
                           release: str | None = None, msccl: bool = True,
                           dtype: Any = "float32", amd_host: bool = True,
                           arch: str = DEFAULT_ARCH) -> tuple[list[RcclChoice], str]:
    """RCCL's choice for an allreduce of each size over ``nodes`` 8-GPU gfx942 (or gfx950)
    nodes.

    Args:
        nodes: whole nodes, >= 1 (a power of two or not: RCCL's tree takes ``log2`` floored).
        sizes_bytes: message sizes in bytes, each >= 1.
        release: an RCCL release (``"2.21.5"``) or ROCm one (``"rocm-6.3"``); default 2.26.6.
        msccl: whether MSCCL is on (``RCCL_MSCCL_ENABLE``, default on).
        dtype: the element type, a ``torch.dtype`` or any spelling
            :func:`distlab.vocabulary.dtype_name` reads (``"bf16"``, ``"torch.bfloat16"``);
            bfloat16 matters: from 2.26.6 it skips MSCCL above 8 MiB.
        amd_host: an AMD CPU (network overhead 2 us) or not (1 us).
        arch: ``"gfx942"`` (MI300X, MI325X; default) or ``"gfx950"`` (MI350X, MI355X).

    Returns:
        One :class:`RcclChoice` per size, and the release note (``""`` when the release is
        one read, else how it is priced).

    Raises:
        ValueError: a node count below 1, a size below 1, a release not written as one (a ROCm
            release without ``rocm-`` included: :func:`~.tables.resolve_release`), a dtype
            the vocabulary does not know, or an architecture whose tables are not held.
        TypeError: a non-int count or size, a non-bool ``msccl`` / ``amd_host``.
    """
    check_int("nodes", nodes, minimum=1)
    sizes = check_sizes(sizes_bytes)
    resolved = resolve_release(release, check_arch(arch))
    dtype = dtype_name(dtype)
    msccl = check_bool("msccl", msccl)
    amd_host = check_bool("amd_host", amd_host)
    t = resolved.tables
    overhead = NET_OVERHEAD_US if amd_host else 1.0
    out = []
    for s in sizes:
        cands = tuple(_candidate(t, nodes, s, a, p, overhead)
                      for a in _ALGORITHMS for p in _PROTOCOLS if _enabled(t, nodes, a, p))
        skip_bf16 = (dtype == "bfloat16" and t.msccl_skips_bf16_over is not None
                     and s > t.msccl_skips_bf16_over)
        if nodes == 1 and msccl and s <= t.msccl_max_bytes and not skip_bf16:
            out.append(RcclChoice(s, nodes, "msccl", "allpairs", _msccl_protocol(s), None,
                                  cands, t.arch))
            continue
        best = min(cands, key=lambda c: c.time_us)
        proto = _protocol_override(t, nodes, s)
        if proto is None or proto == best.protocol:
            out.append(RcclChoice(s, nodes, "cost model", best.algorithm, best.protocol,
                                  best.time_us, cands, t.arch))
            continue
        ran = _candidate(t, nodes, s, best.algorithm, proto, overhead)
        out.append(RcclChoice(s, nodes, "cost model + protocol override", best.algorithm, proto,
                              ran.time_us, cands, t.arch))
    return out, resolved.note
