"""What a shortfall points to: each known fault priced, and the one that explains the rows.

A fault is a mechanism the NCCL model can price (:data:`FAULTS`): NVLS not in use, one NIC of a
node's down, half its NICs, a GPU's PCIe link trained to x8, an algorithm or a protocol forced
by the environment. Each is the run's setup changed as the fault changes the box, priced size
by size; a fault explains a row outside its band when the row falls inside the band around the
fault's price. Faults that explain most of the rows outside their band (:data:`EXPLAINS`),
leave at least as many rows inside their band as the healthy price did, and fit the rows closer
than it (the median of ``|log(price / measured)|``) are named, the closest fit first, each
with its evidence and the rerun that would confirm it, priced.

Where no fault explains the rows, their shape is named (:func:`_shape`): only the small sizes
(launch, latency, the proxy thread), every size across nodes (the fabric or its routing), every
size on one node (the GPUs' own links, or the PCIe path on a PCIe box), or a step where NCCL
changes algorithm or protocol.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from distlab.health.bands import size_class
from distlab.health.expected import NotPriced, expected
from distlab.health.rows import RowVerdict
from distlab.health.setup import Setup
from distlab.logs.nccl_tests import Row
from distlab.vocabulary import error_pct, size_label

__all__ = ["EXPLAINS", "FAULTS", "Cause", "Fault", "diagnose"]

EXPLAINS = 0.75
"""A fault is named when its price brings at least this share of the rows outside their band
inside it (and keeps the rows inside it there)."""


@dataclass(frozen=True)
class Cause:
    """A named cause: what it is, the evidence, the rerun that would confirm it and what the
    model expects of that rerun (``(nbytes, us)`` per size; empty where it cannot price it)."""

    name: str
    evidence: str
    rerun: str
    rerun_expected: tuple[tuple[int, float], ...] = ()
    explained: float = 0.0


@dataclass(frozen=True)
class Fault:
    """One fault: its name, when it applies, how it changes the setup, and the rerun."""

    name: str
    applies: Callable[[Setup], bool]
    change: Callable[[Setup], Setup]
    rerun: str


def _without_nvls(s: Setup) -> Setup:
    algos = s.algorithms or (("ring", "tree", "nvls") if s.nodes == 1 else
                             ("ring", "tree", "nvls_tree"))
    return replace(s, algorithms=tuple(a for a in algos if not a.startswith("nvls")))


def _nics(s: Setup, rails: int) -> Setup:
    assert s.network is not None
    return replace(s, network=replace(s.network, rails=rails, key=f"{s.network.key}-faulty",
                                      ports_per_device=1))


def _pcie_x8(s: Setup) -> Setup:
    return replace(s, box=replace(s.box, pcie_lanes=8, link_gbps=s.box.link_gbps / 2))


def _has_nvls(s: Setup) -> bool:
    allowed = s.algorithms is None or any(a.startswith("nvls") for a in s.algorithms)
    return s.box.fabric == "nvswitch" and s.box.sm >= 90 and allowed


FAULTS: tuple[Fault, ...] = (
    Fault("NVLS (NVLink SHARP) not in use", _has_nvls, _without_nvls,
          "NCCL_DEBUG=INFO: look for 'NVLS multicast support is available'; check that "
          "nvidia-fabricmanager (and IMEX on GB200) runs and NCCL_NVLS_ENABLE is not 0"),
    Fault("one NIC of each node down or unused",
          lambda s: s.network is not None and s.network.rails >= 2,
          lambda s: _nics(s, s.network.rails - 1),  # type: ignore[union-attr]
          "ibstat / ibdev2netdev on every node (a port Down or at a lower rate); "
          "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET lists the NICs NCCL uses"),
    Fault("half the NICs of each node unused",
          lambda s: s.network is not None and s.network.rails >= 4,
          lambda s: _nics(s, s.network.rails // 2),  # type: ignore[union-attr]
          "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET: count the NICs NCCL opens; check "
          "NCCL_IB_HCA and the GPU-NIC affinity (nvidia-smi topo -m)"),
    Fault("a GPU's PCIe link trained down to x8",
          lambda s: s.box.fabric == "pcie" and s.box.pcie_lanes == 16, _pcie_x8,
          "nvidia-smi -q | grep -A2 'Link Width' on every GPU (Current x8 where Max is x16), "
          "lspci -vv LnkSta"),
    Fault("NCCL_ALGO=Ring in force", lambda s: s.algorithms is None,
          lambda s: replace(s, algorithms=("ring",)),
          "print the environment of the run (env | grep NCCL_) and unset NCCL_ALGO"),
    Fault("NCCL_ALGO=Tree in force", lambda s: s.algorithms is None,
          lambda s: replace(s, algorithms=("tree",)),
          "print the environment of the run (env | grep NCCL_) and unset NCCL_ALGO"),
    Fault("NCCL_PROTO=Simple in force", lambda s: s.protocols is None,
          lambda s: replace(s, protocols=("Simple",)),
          "print the environment of the run (env | grep NCCL_) and unset NCCL_PROTO"),
)
"""The faults tried, in the order a maintainer would check them."""


def _rerun_of(setup: Setup, collective: str, rows: Sequence[Row]) -> tuple[tuple[int, float], ...]:
    """The healthy price of every size, ``(nbytes, us)``: what the rerun should measure."""
    try:
        return tuple((p.nbytes, p.seconds * 1e6)
                     for p in expected(setup, collective, [r.nbytes for r in rows]))
    except (NotPriced, ValueError):
        return ()


def _shares(verdicts: Sequence[RowVerdict]) -> str:
    """``0.48-0.52 of the price`` over ``verdicts``."""
    shares = [v.share for v in verdicts]
    lo, hi = min(shares), max(shares)
    return f"{lo:.2f} of the price" if abs(hi - lo) < 0.01 else f"{lo:.2f}-{hi:.2f} of the price"


def _span(verdicts: Sequence[RowVerdict]) -> str:
    a, b = verdicts[0].nbytes, verdicts[-1].nbytes
    return size_label(a) if a == b else f"{size_label(a)} to {size_label(b)}"


def _faults(setup: Setup, collective: str, rows: Sequence[Row],
            verdicts: Sequence[RowVerdict], low: Sequence[RowVerdict]) -> list[Cause]:
    causes: list[tuple[float, Cause]] = []
    healthy_fit = statistics.median(abs(math.log(v.share)) for v in verdicts)
    for fault in FAULTS:
        if not fault.applies(setup):
            continue
        try:
            priced = expected(fault.change(setup), collective, [r.nbytes for r in rows])
        except (NotPriced, ValueError):
            continue
        inside = []
        for v, p in zip(verdicts, priced, strict=True):
            err = error_pct(v.measured_us, p.seconds * 1e6)
            inside.append(v.band.low_pct <= err <= v.band.high_pct)
        explained = sum(ok for v, ok in zip(verdicts, inside, strict=True) if v.verdict == "low")
        share = explained / len(low)
        fit = statistics.median(abs(math.log(p.seconds * 1e6 / v.measured_us))
                                for v, p in zip(verdicts, priced, strict=True))
        was_inside = sum(v.verdict == "ok" for v in verdicts)
        if share >= EXPLAINS and sum(inside) >= was_inside and fit < healthy_fit:
            moved = [v for v, p in zip(verdicts, priced, strict=True)
                     if abs(p.seconds - v.expected_us * 1e-6) > 0.02 * p.seconds]
            causes.append((fit, Cause(
                fault.name,
                f"{explained} of {len(low)} rows outside their band ({_span(low)}) run at "
                f"{_shares(low)}; priced with this fault, {sum(inside)} of {len(verdicts)} rows "
                f"fall inside their band (the fault moves {len(moved)} of the sizes)",
                fault.rerun, _rerun_of(setup, collective, rows), share)))
    return [c for _, c in sorted(causes, key=lambda fc: fc[0])]


def _shape(setup: Setup, collective: str, rows: Sequence[Row],
           verdicts: Sequence[RowVerdict], low: Sequence[RowVerdict]) -> Cause:
    classes = {size_class(v.nbytes) for v in low}
    rerun = _rerun_of(setup, collective, rows)
    first = verdicts.index(low[0])
    contiguous = all(v.verdict == "low" for v in verdicts[first:])
    switch = first > 0 and (verdicts[first - 1].algorithm, verdicts[first - 1].protocol) != \
        (low[0].algorithm, low[0].protocol)
    if classes == {"small"}:
        how = ("one process drives every GPU of a node (-g > 1): rerun with one process per "
               "GPU (mpirun -np N ... -g 1), " if setup.harness == "nccl-tests" else "")
        return Cause("launch, latency or the proxy thread (only the small sizes are slow)",
                     f"{len(low)} rows from {_span(low)} run at {_shares(low)}; every size "
                     "from 1 MiB on is inside its band",
                     how + "pin the processes to the GPUs' NUMA nodes (nvidia-smi topo -m), and "
                     "check NCCL_DEBUG=INFO for proxy or launch warnings", rerun)
    if switch and contiguous and len(low) < len(verdicts):
        return Cause(f"NCCL's switch to {low[0].algorithm}/{low[0].protocol} at "
                     f"{size_label(low[0].nbytes)}",
                     f"every size from {size_label(low[0].nbytes)} on, where the model switches "
                     f"from {verdicts[first - 1].algorithm}/{verdicts[first - 1].protocol}, runs "
                     f"at {_shares(low)}",
                     f"rerun with NCCL_ALGO={verdicts[first - 1].algorithm} "
                     f"NCCL_PROTO={verdicts[first - 1].protocol} (priced: python -m "
                     "distlab.health LOG --env ...), and NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING",
                     rerun)
    if setup.nodes > 1:
        pair = replace(setup, nodes=2, world_size=2 * setup.gpus_per_node)
        return Cause("the fabric or its routing between nodes",
                     f"{len(low)} of {len(verdicts)} sizes, {_span(low)}, run at "
                     f"{_shares(low)}, small sizes too: no single NIC or NVLink fault prices "
                     "this shape",
                     f"run the same test on each pair of nodes ({pair.world_size} GPUs) to find "
                     "the slow link or rack (the price below is a pair's); check the switches' "
                     "counters and the routing (adaptive routing, ECMP on RoCE)",
                     _rerun_of(pair, collective, rows))
    if setup.box.fabric == "pcie":
        return Cause("the PCIe path between the GPUs",
                     f"{len(low)} of {len(verdicts)} sizes, {_span(low)}, run at "
                     f"{_shares(low)}",
                     "nvidia-smi topo -m and -p2p r (peer-to-peer on?), nvidia-smi -q "
                     "(PCIe link generation and width), ACS off on the switches, and the "
                     "link between CPU sockets where the GPUs span two", rerun)
    return Cause("the GPUs' own links",
                 f"{len(low)} of {len(verdicts)} sizes, {_span(low)}, run at {_shares(low)}",
                 "nvidia-smi nvlink -s / -e (links down, errors), nvidia-smi -q (clocks), "
                 "dcgmi diag -r 2", rerun)


def diagnose(setup: Setup, collective: str, rows: Sequence[Row],
             verdicts: Sequence[RowVerdict]) -> list[Cause]:
    """The causes of the rows slower than their band, best first (empty where none is)."""
    low = [v for v in verdicts if v.verdict == "low"]
    if not low:
        return []
    return _faults(setup, collective, rows, verdicts, low) or \
        [_shape(setup, collective, rows, verdicts, low)]
