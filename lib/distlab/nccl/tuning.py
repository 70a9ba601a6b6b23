"""How NCCL times and chooses an allreduce: its own tuning model, term by term.

For every (algorithm, protocol) it may use, NCCL estimates

    time_us = latency_us + nbytes / (1000 * algbw_GBps)

and runs the cheapest (``src/enqueue.cc`` ``topoGetAlgoInfo``; ties go to the first in NCCL's order,
Tree before Ring before NVLS and LL before LL128 before Simple). ``latency_us`` and ``algbw_GBps``
come from ``ncclTopoTuneModel`` (``src/graph/tuning.cc``), which starts from the graphs of
:func:`distlab.nccl.boxes.nccl_graphs` (channels x GB/s per channel) and applies:

- **protocol efficiency**: LL moves 8 data bytes in each 16-byte line (the other 8 are flags),
  so a ring's LL bus bandwidth is half the link's and at most a per-GPU-class cap; LL128 moves
  120 of 128 bytes (NCCL uses 0.92) and at most a per-channel cap; Simple moves whole buffers;
- **algorithm**: a ring allreduce is ``2(n-1)`` steps, so its algorithm bandwidth is the bus
  bandwidth times ``n / 2(n-1)``; a tree (a chain inside one node) reduces up and broadcasts
  down, 0.5; NVLS (the NVSwitch reduces) gets the ring's factor on a bus bandwidth of its
  own: per channel, the NVLink speed times an NVLS efficiency (0.85 on Hopper) times
  ``(channels-1)/channels``, doubled because an allreduce pipelines its reduce-scatter and
  all-gather halves;
- **latency**: a base cost per algorithm and protocol plus a per-hop latency per step (ring:
  ``2(n-1)`` steps, tree: ``2(n-1)`` hops up and down the chain), per hop class (NVLink or
  PCI); NVLS has one flat latency;
- **tree correction**: a per-size factor on tree bandwidth (``treeCorrectionFactor``) that NCCL
  applies because "trees are not perfectly sticking to the model for medium sizes".

All constants are NVIDIA/nccl ``v2.28.9-1`` (:data:`distlab.nccl.boxes.NCCL_TAG`,
the NCCL of torch 2.11), file named beside each (``tuning.cc`` keeps them in
``ncclTunerConstantsDefaults``). This is NCCL's *estimate*, the thing it minimizes to choose; a
measured time also holds what the estimate leaves out (kernel launch and the host loop of the
benchmark, channels NCCL launches fewer of for small sizes, chunking). No term beyond NCCL's own is
added here.

One node only: ``world_size`` GPUs of one box (NCCL's multi-node terms, network hops, NVLS-Tree,
CollNet and PAT, are not modelled).

Units: bytes and seconds at the public functions; the tables are in microseconds and GB/s
(1e9 bytes/s) as NCCL's are. ``busbw`` is nccl-tests' ``algbw * 2(n-1)/n``
(:func:`distlab.vocabulary.busbw_factor`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from distlab._checks import check_int, check_sizes
from distlab.nccl import versions
from distlab.nccl.boxes import BoxLike, GpuBox, NcclGraph, box_graphs, gpu_box
from distlab.nccl.versions import NcclConstants, nccl_constants
from distlab.vocabulary import bandwidth_error_pct, busbw_factor, gb_per_s

__all__ = ["ALGORITHMS", "PROTOCOLS", "Candidate", "Choice", "PublishedComparison",
           "TuningEntry", "algorithm_from_nccl", "box_choices", "box_table", "busbw_bound_gbps",
           "busbw_gbps", "check_sizes", "check_subset", "compare_published",
           "format_tuning_table", "nccl_allreduce", "predict_nccl_allreduce", "price_entry",
           "tuning_table"]

ALGORITHMS = ("tree", "ring", "nvls")
"""NCCL's single-node allreduce algorithms, in its enum order (``NCCL_ALGO_TREE`` 0, ``RING`` 1,
``NVLS`` 4; CollNet needs a SHARP network, NVLS-Tree and PAT are multi-node)."""
PROTOCOLS = ("LL", "LL128", "Simple")
"""NCCL's protocols in enum order (``NCCL_PROTO_LL`` 0, ``LL128`` 1, ``SIMPLE`` 2)."""

#: ``baseLatencies`` (``src/graph/tuning.cc``), us: the fixed cost of one collective, per
#: algorithm and protocol (kernel start, the protocol's first handshake).
BASE_LATENCY_US = {("tree", "LL"): 6.8, ("tree", "LL128"): 14.0, ("tree", "Simple"): 8.4,
                   ("ring", "LL"): 6.6, ("ring", "LL128"): 14.0, ("ring", "Simple"): 8.4,
                   ("nvls", "Simple"): 0.0}

#: ``hwLatencies[NCCL_HW_NVLINK|NCCL_HW_PCI]`` (``src/graph/tuning.cc``), us per step (ring) or per
#: hop (tree); NVLS has one value for the whole operation, which replaces the base latency.
HOP_LATENCY_US = {
    "nvlink": {("tree", "LL"): 0.6, ("tree", "LL128"): 1.25, ("tree", "Simple"): 4.0,
               ("ring", "LL"): 0.6, ("ring", "LL128"): 1.9, ("ring", "Simple"): 3.4,
               ("nvls", "Simple"): 25.0},
    "pci": {("tree", "LL"): 1.0, ("tree", "LL128"): 1.9, ("tree", "Simple"): 4.0,
            ("ring", "LL"): 1.0, ("ring", "LL128"): 2.5, ("ring", "Simple"): 5.7},
}

#: ``llMaxBws[compCapIndex][0]`` (single node), GB/s of bus bandwidth LL reaches at most.
LL_MAX_BUSBW_GBPS = {"ampere": 87.7, "hopper": 141.0, "blackwell": 2 * 141.0}
#: ``perChMaxRingLL128Bws``, ``perChMaxTreeLL128Bws``, ``perChMaxTreeBws`` (single node),
#: GB/s per channel.
RING_LL128_PER_CHANNEL_GBPS = {"ampere": 20.0, "hopper": 36.7, "blackwell": 2 * 36.7}
"""(Blackwell's ring LL128 cap is per release: ``NcclConstants.blackwell_ring_ll128_gbps``.)"""
TREE_LL128_PER_CHANNEL_GBPS = {"ampere": 20.0, "hopper": 36.7, "blackwell": 55.6}
TREE_PER_CHANNEL_GBPS = {"ampere": 24.0, "hopper": 38.7, "blackwell": 70.0}
#: ``nvlsEfficiency`` (``src/graph/tuning.cc``): the fraction of a channel's NVLink speed NVLS
#: turns into reduced data (Ampere has no NVLS).
NVLS_EFFICIENCY = {"hopper": 0.85, "blackwell": 0.74}

LL_DATA_FRACTION = 0.5
"""Ring LL: ``busBw * .5``, 8 data bytes per 16-byte line (4-byte data + 4-byte flag, twice)."""
LL128_DATA_FRACTION = 0.92
"""Ring LL128: ``busBw * 0.92``, NCCL's figure for 120 data bytes per 128-byte line."""
TREE_EFFICIENCY = 0.92
"""Tree allreduce: ``busBw * .92`` before the protocol factors."""
TREE_LL_FRACTION = 1 / 3.8
"""Tree LL: ``busBw * 1.0/3.8``."""
TREE_LL128_FRACTION = 7 / 9
"""Tree LL128 on one node: ``busBw * 7.0/9.0``."""
TREE_ALG_PER_BUS = 0.5
"""Tree algorithm bandwidth per bus bandwidth (``ratio *= .5``); ring and NVLS use
``n / (2(n-1))``, see :func:`_alg_per_bus`."""

#: ``treeCorrectionFactor[protocol][log2(nbytes/64)]`` (``src/graph/tuning.cc``), applied to
#: tree bandwidth for 64 B <= nbytes < 512 MiB.
TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0,
           1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9,
              .9, .9, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7,
               .8, .9, .9),
}

NCCL_ALGO_NAMES = {"tree": "Tree", "ring": "Ring", "nvls": "NVLS"}
"""How ``NCCL_ALGO`` spells each algorithm (``ncclAlgoStr``)."""


@dataclass(frozen=True)
class TuningEntry:
    """One cell of NCCL's tuning table (what ``NCCL_DEBUG_SUBSYS=TUNING`` prints as
    ``latency/bandwidth``), or why the pair is off.

    Attributes:
        algorithm, protocol: the pair.
        enabled: whether NCCL may pick it.
        reason: why not, when ``enabled`` is False ("" otherwise).
        latency_us: NCCL's fixed term, us.
        busbw_gbps: NCCL's bus bandwidth after the protocol factors, GB/s.
        algbw_gbps: ``busbw_gbps`` converted to algorithm bandwidth, GB/s (before the tree
            correction, which depends on the size).
    """

    algorithm: str
    protocol: str
    enabled: bool
    reason: str
    latency_us: float
    busbw_gbps: float
    algbw_gbps: float


@dataclass(frozen=True)
class Candidate:
    """One enabled (algorithm, protocol) priced at one size: ``seconds`` is NCCL's estimate."""

    algorithm: str
    protocol: str
    latency_us: float
    algbw_gbps: float
    seconds: float


@dataclass(frozen=True)
class Choice:
    """NCCL's pick for one message size and every candidate it compared (NCCL's order)."""

    nbytes: int
    world_size: int
    algorithm: str
    protocol: str
    seconds: float
    candidates: tuple[Candidate, ...]

    @property
    def busbw_gbps(self) -> float:
        """nccl-tests' bus bandwidth of the predicted time, GB/s (0 for one rank)."""
        return busbw_gbps(self.nbytes, self.seconds, self.world_size)


def busbw_gbps(nbytes: int, seconds: float, world_size: int) -> float:
    """nccl-tests' allreduce bus bandwidth: ``nbytes / seconds * 2(n-1)/n``
    (:func:`distlab.vocabulary.busbw_factor`), GB/s (1e9 B/s); 0 for ``world_size`` 1 or zero
    time."""
    if world_size < 2 or seconds <= 0:
        return 0.0
    return gb_per_s(nbytes, seconds) * (busbw_factor("all_reduce", world_size) or 0.0)


def busbw_bound_gbps(preset: BoxLike, world_size: int, algorithm: str) -> float:
    """The most bus bandwidth ``algorithm`` can show on the box's spec link, GB/s.

    Ring and tree move ``2(n-1)/n`` bytes per byte reduced through every GPU's link, so their
    busbw cannot exceed the per-direction link bandwidth. With NVLS the switch does the
    reduction: each GPU sends its buffer once and receives the result once, so its *algorithm*
    bandwidth is bounded by the link and its busbw by ``link * 2(n-1)/n``.
    """
    box = gpu_box(preset)
    n = _check_world_size(box, world_size)
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {', '.join(map(repr, ALGORITHMS))}, "
                         f"got {algorithm!r}")
    factor = (busbw_factor("all_reduce", n) or 0.0) if algorithm == "nvls" else 1.0
    return box.link_gbps * factor


def tuning_table(preset: BoxLike, world_size: int, *, algorithms: Iterable[str] | None = None,
                 protocols: Iterable[str] | None = None,
                 nccl_version: str | NcclConstants | None = None) -> list[TuningEntry]:
    """NCCL's allreduce tuning table for ``world_size`` GPUs of ``preset`` (a :class:`GpuBox` or a
    name in :data:`distlab.nccl.boxes.GPU_BOXES`), every (algorithm, protocol) in
    NCCL's order.

    ``algorithms`` / ``protocols`` restrict the choice as ``NCCL_ALGO`` / ``NCCL_PROTO`` do
    (names from :data:`ALGORITHMS` / :data:`PROTOCOLS`; ``None`` = NCCL's defaults).
    ``world_size`` must be in ``[2, preset.gpus]`` (one GPU has no table). ``nccl_version``:
    the release whose constants apply
    (:func:`~distlab.nccl.versions.nccl_version`; ``None``: 2.28.9).
    """
    version = versions.nccl_constants(nccl_version)
    box = gpu_box(preset)
    n = check_int("world_size", world_size, minimum=2, maximum=box.gpus)
    return box_table(box, n, check_subset("algorithms", algorithms, ALGORITHMS),
                     check_subset("protocols", protocols, PROTOCOLS), version)


def box_table(box: GpuBox, n: int, algos: tuple[str, ...], protos: tuple[str, ...],
              version: NcclConstants) -> list[TuningEntry]:
    """:func:`tuning_table` inside the model: every argument resolved and checked by the caller
    (``n`` in ``[2, box.gpus]``, ``algos`` / ``protos`` from :func:`check_subset`)."""
    graphs = box_graphs(box, n, version=version)
    out = []
    for a in ALGORITHMS:
        for p in PROTOCOLS:
            if a == "nvls" and p != "Simple":
                continue  # tuning.cc: NVLS runs Simple only
            reason = _disabled_reason(box, graphs, a, p, algos, protos, version, n)
            if a not in graphs:
                out.append(TuningEntry(a, p, False, reason, 0.0, 0.0, 0.0))
                continue
            bus = _bus_bandwidth(box, graphs[a], a, p, version)
            out.append(TuningEntry(a, p, not reason, reason,
                                   _latency_us(graphs[a], n, p, version), bus,
                                   bus * _alg_per_bus(a, n, version)))
    return out


def format_tuning_table(preset: BoxLike, world_size: int) -> list[str]:
    """:func:`tuning_table` as text lines: ``algorithm protocol latency(us) busbw algbw``."""
    lines = [f"{'algorithm':>9} {'protocol':>8} {'lat(us)':>8} {'busbw':>8} {'algbw':>8}  note"]
    for e in tuning_table(preset, world_size):
        note = "" if e.enabled else f"off: {e.reason}"
        lines.append(f"{e.algorithm:>9} {e.protocol:>8} {e.latency_us:>8.1f} "
                     f"{e.busbw_gbps:>8.1f} {e.algbw_gbps:>8.1f}  {note}".rstrip())
    return lines


def nccl_allreduce(preset: BoxLike, world_size: int, sizes_bytes: Sequence[int], *,
                   algorithms: Iterable[str] | None = None,
                   protocols: Iterable[str] | None = None,
                   nccl_version: str | NcclConstants | None = None) -> list[Choice]:
    """NCCL's choice and estimated time for each allreduce size, with every candidate's time.

    Args:
        preset: a :class:`GpuBox` or a name in
        :data:`distlab.nccl.boxes.GPU_BOXES`. world_size: ranks, one per GPU of
        the box, in ``[1, preset.gpus]``. For one rank NCCL
            prices Ring/Simple at zero (``src/enqueue.cc`` ``updateCollCostTable``): the result
            is 0 seconds, no communication.
        sizes_bytes: message sizes in bytes (ints >= 1).
        algorithms, protocols: restrict the choice as ``NCCL_ALGO`` / ``NCCL_PROTO`` do.
        nccl_version: the NCCL release (see :func:`tuning_table`).

    Returns:
        One :class:`Choice` per size, in order.
    """
    box = gpu_box(preset)
    n = _check_world_size(box, world_size)
    sizes = check_sizes(sizes_bytes)
    versions.resolve_nccl_version(nccl_version)  # checked for one rank too
    if n == 1:
        return [Choice(s, 1, "ring", "Simple", 0.0, (Candidate("ring", "Simple", 0.0, 0.0, 0.0),))
                for s in sizes]
    version = versions.nccl_constants(nccl_version)
    return box_choices(box, n, sizes, check_subset("algorithms", algorithms, ALGORITHMS),
                       check_subset("protocols", protocols, PROTOCOLS), version,
                       asked=(algorithms, protocols))


def box_choices(box: GpuBox, n: int, sizes: Sequence[int], algos: tuple[str, ...],
                protos: tuple[str, ...], version: NcclConstants, *,
                asked: tuple[Any, Any] | None = None) -> list[Choice]:
    """:func:`nccl_allreduce` inside the model, for ``n >= 2``: every argument resolved and
    checked by the caller (``sizes`` by :func:`check_sizes`); ``asked``: the ``algorithms`` and
    ``protocols`` as the caller was given them, for the error when no pair is left (default:
    ``algos`` and ``protos``)."""
    table = [e for e in box_table(box, n, algos, protos, version) if e.enabled]
    if not table:
        algorithms, protocols = (algos, protos) if asked is None else asked
        raise ValueError(f"no algorithm/protocol available for allreduce on {box.name} with "
                         f"algorithms={algorithms!r}, protocols={protocols!r} (NCCL fails the "
                         "same way)")
    out = []
    for s in sizes:
        cands = tuple(price_entry(e, s) for e in table)
        best = min(cands, key=lambda c: c.seconds)  # min() keeps the first of equal times
        out.append(Choice(s, n, best.algorithm, best.protocol, best.seconds, cands))
    return out


def predict_nccl_allreduce(preset: BoxLike, world_size: int, sizes_bytes: Sequence[int], *,
                           algorithms: Iterable[str] | None = None,
                           protocols: Iterable[str] | None = None,
                           nccl_version: str | NcclConstants | None = None) -> list[float]:
    """Seconds of NCCL's own allreduce at each size (its choice of algorithm and protocol);
    arguments as :func:`nccl_allreduce`."""
    return [c.seconds for c in nccl_allreduce(preset, world_size, sizes_bytes,
                                              algorithms=algorithms, protocols=protocols,
                                              nccl_version=nccl_version)]


@dataclass(frozen=True)
class PublishedComparison:
    """A published point beside the model: ``error_pct`` of the published run's time against
    the model's (:func:`distlab.vocabulary.bandwidth_error_pct` of the two bus bandwidths:
    ``(predicted - published) / published`` of busbw, in percent; positive: the run was slower
    than the model)."""

    point: dict[str, Any]
    choice: Choice
    predicted_busbw_gbps: float
    error_pct: float


def compare_published(points: Iterable[dict[str, Any]]) -> list[PublishedComparison]:
    """Each published point (keys ``preset``, ``world_size``, ``nbytes``, ``busbw_gbps`` and
    ``nccl_algo``: the ``NCCL_ALGO`` the run forced, or None) against the model run the same
    way."""
    out = []
    for p in points:
        forced = p.get("nccl_algo")
        algos = None if forced is None else [algorithm_from_nccl(forced)]
        choice = nccl_allreduce(p["preset"], p["world_size"], [p["nbytes"]], algorithms=algos)[0]
        pred = choice.busbw_gbps
        out.append(PublishedComparison(dict(p), choice, pred,
                                       bandwidth_error_pct(p["busbw_gbps"], pred)))
    return out


# --- the terms ------------------------------------------------------------------------------

NVLS_ALG_PER_BUS_BEFORE_2_28 = 5 / 6
"""NVLS algorithm bandwidth per bus bandwidth up to 2.27.5 (``ratio = 5.0/6.0``)."""


def _alg_per_bus(algorithm: str, n: int, version: NcclConstants) -> float:
    """Algorithm bandwidth per bus bandwidth (``ratio`` in ``ncclTopoTuneModel``)."""
    if algorithm == "tree":
        return TREE_ALG_PER_BUS
    if algorithm == "nvls" and version.nvls_bandwidth != "efficiency":
        return NVLS_ALG_PER_BUS_BEFORE_2_28
    return n / (2 * (n - 1))


def _table_generation(box: GpuBox, version: NcclConstants) -> str:
    """The row of NCCL's per-architecture tables: Blackwell reads Hopper's before 2.27."""
    gen = box.generation
    return "hopper" if gen == "blackwell" and not version.blackwell_row else gen


def _ll_max(box: GpuBox, version: NcclConstants) -> float:
    gen = _table_generation(box, version)
    return version.ll_max_hopper_gbps if gen == "hopper" else LL_MAX_BUSBW_GBPS[gen]


def _bus_bandwidth(box: GpuBox, graph: NcclGraph, algorithm: str, protocol: str,
                   version: NcclConstants) -> float:
    """NCCL's bus bandwidth for one pair, GB/s: the graph's ``channels * bw`` with the protocol
    and algorithm refinements of ``ncclTopoTuneModel``. (Its extra 0.85 for trees applies to
    ``NCCL_TOPO_PATTERN_TREE`` graphs; a single node keeps the balanced tree it finds first.)"""
    gen = _table_generation(box, version)
    ch = graph.n_channels
    if algorithm == "nvls":
        if version.nvls_bandwidth == "generic":  # 2.18.5: nChannels * bwIntra
            return ch * graph.bw_intra_gbps
        if version.nvls_bandwidth == "min":  # 2.20.5 - 2.27.5
            return ch * min(graph.bw_intra_gbps, graph.bw_inter_gbps)
        # 2.28.9, per channel: min(NVLS speed of the NVLinks, bwInter)
        per_channel = graph.bw_intra_gbps * NVLS_EFFICIENCY[box.generation] * (ch - 1) / ch * 2
        return ch * min(per_channel, graph.bw_inter_gbps)
    bus = graph.busbw_gbps
    if algorithm == "ring":
        if protocol == "LL":
            return min(_ll_max(box, version), bus * version.ring_ll_fraction)
        if protocol == "LL128":
            cap = (version.blackwell_ring_ll128_gbps[0] if gen == "blackwell"
                   else RING_LL128_PER_CHANNEL_GBPS[gen])
            return min(bus * LL128_DATA_FRACTION, ch * cap)
        return bus
    bus = min(bus * TREE_EFFICIENCY, ch * TREE_PER_CHANNEL_GBPS[gen])
    if protocol == "LL":
        return min(bus * TREE_LL_FRACTION, _ll_max(box, version))
    if protocol == "LL128":
        return min(bus * TREE_LL128_FRACTION, ch * TREE_LL128_PER_CHANNEL_GBPS[gen])
    return bus


def base_and_hop_us(graph: NcclGraph, protocol: str,
                    version: NcclConstants | None = None) -> tuple[float, float]:
    """NCCL's base latency and per-step (ring) or per-hop (tree) latency of ``graph``'s
    algorithm with ``protocol`` for the release, us (NVLS: its flat latency and 0)."""
    v = nccl_constants(version)
    a = graph.algorithm
    if a == "nvls":
        return v.nvls_latency_us, 0.0
    if (a, protocol) == ("tree", "Simple"):
        return v.tree_simple_base_us, v.tree_hop_us(graph.hop_class)
    return BASE_LATENCY_US[(a, protocol)], HOP_LATENCY_US[graph.hop_class][(a, protocol)]


def _latency_us(graph: NcclGraph, n: int, protocol: str, version: NcclConstants) -> float:
    """NCCL's fixed term, us: base + ``2(n-1)`` ring steps or ``2(n-1)`` tree hops of the
    per-hop latency of the graph's path class; NVLS one flat value."""
    base, hop = base_and_hop_us(graph, protocol, version)
    return base + 2 * (n - 1) * hop


def _disabled_reason(box: GpuBox, graphs: dict[str, NcclGraph], algorithm: str, protocol: str,
                     algos: tuple[str, ...], protos: tuple[str, ...], version: NcclConstants,
                     n: int) -> str:
    """Why NCCL would not use the pair ("" if it may), after ``ncclTopoTuneModel``'s rules."""
    if algorithm == "nvls" and algorithm not in graphs:
        return ("no NVSwitch" if box.fabric != "nvswitch" else
                "needs compute capability >= 9.0" if box.sm < 90 else
                "no NVLS graph")
    if algorithm == "nvls" and n < version.nvls_min_gpus:
        return f"NVLS needs {version.nvls_min_gpus} GPUs in NCCL {version.release}"
    if (protocol == "LL128" and not version.ll128_all_arches
            and box.sm not in (70, 80, 90)):
        return f"LL128 is off by default on compute capability {box.sm} in NCCL {version.release}"
    if algorithm == "nvls" and graphs["nvls"].n_channels < 2:
        return "NVLS needs at least 2 channels"
    if protocol == "LL128" and graphs[algorithm].path != "NVL":
        return "LL128 needs NVLink paths (typeIntra <= PATH_NVB)"
    if algorithm not in algos:
        return "excluded by NCCL_ALGO"
    if protocol not in protos:
        return "excluded by NCCL_PROTO"
    return ""


def price_entry(entry: TuningEntry, nbytes: int) -> Candidate:
    """``ncclTopoGetAlgoTime``: latency + nbytes / algbw, with the tree correction."""
    bw = entry.algbw_gbps
    if entry.algorithm == "tree":
        log_size = int(math.log2(nbytes >> 6)) if nbytes >> 6 else -1
        if 0 <= log_size < len(TREE_CORRECTION[entry.protocol]):
            bw *= TREE_CORRECTION[entry.protocol][log_size]
    us = entry.latency_us + nbytes / (1000.0 * bw)
    return Candidate(entry.algorithm, entry.protocol, entry.latency_us, bw, us * 1e-6)


# --- argument checks ------------------------------------------------------------------------

def _check_world_size(box: GpuBox, world_size: Any) -> int:
    return check_int("world_size", world_size, minimum=1, maximum=box.gpus)


def check_subset(name: str, values: Iterable[str] | None,
                 allowed: tuple[str, ...]) -> tuple[str, ...]:
    """``values`` as a non-empty tuple of names from ``allowed`` (``None``: all of them), as
    ``NCCL_ALGO`` / ``NCCL_PROTO`` restrict NCCL's choice."""
    if values is None:
        return allowed
    if isinstance(values, str) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be a sequence of names from {allowed}, got "
                        f"{type(values).__name__} {values!r}")
    vals = tuple(values)
    bad = [v for v in vals if v not in allowed]
    if bad or not vals:
        raise ValueError(f"{name} must be a non-empty subset of {allowed}, got {vals!r}")
    return vals


def algorithm_from_nccl(name: str) -> str:
    """``"NVLS"`` -> ``"nvls"`` etc. (``NCCL_ALGO`` spelling, case-insensitive like NCCL)."""
    for key, spelled in NCCL_ALGO_NAMES.items():
        if name.lower() == spelled.lower():
            return key
    raise ValueError(f"nccl_algo must be one of {', '.join(NCCL_ALGO_NAMES.values())} or None, "
                     f"got {name!r}")
