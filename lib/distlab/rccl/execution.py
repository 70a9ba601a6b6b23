"""How long RCCL's choice takes: an execution model per path, fitted on published rccl-tests
tables and judged on others.

RCCL's estimate (:mod:`.tuning`) steers its choice and is far from a run's time, so the time of
what RCCL runs is modelled here from the hardware, as a fixed cost plus the bytes each GPU moves
over what bounds it:

- **MSCCL allpairs** (one node, up to 16-20 MiB): a reduce-scatter and an all-gather in which
  every GPU exchanges ``S / 8`` with each of its seven peers over its own xGMI link, so the
  link moves ``2 S / 8`` bytes: ``fixed[protocol] + 2 S / 8 / (link x (0.5 for LL))`` (LL moves
  8 data bytes in each 16-byte line).
- **Ring on one node** (Simple): ``fixed + S x 2(n-1)/n / (efficiency x 336 GB/s)``, the seven
  links at RCCL's 48 GB/s each.
- **Ring across nodes** (Simple): the same with the bus bandwidth of the node's NICs: a ring
  leaves each node once per channel, so the node's egress equals the bus bandwidth:
  ``fixed + S x 2(n-1)/n / (efficiency x NICs x NIC rate)``.
- **Tree across nodes** (LL, LL128, Simple): what RCCL runs from 64 KiB to 128-256 MiB on two
  or more nodes. On two nodes each node sends its partial sum
  ``S`` out once and takes the result back once; the runs move it at a rate well under the
  NICs' (about 140 GB/s a node where eight NICs carry 400) and no source gives that rate, so it
  is fitted: ``fixed x L(nodes) / L(2) + max(S x line / tree rate, k S x line / NICs)`` where
  ``line`` is the protocol's bytes on the wire per data byte (LL 2, LL128 128/120, Simple 1),
  ``L`` RCCL's own tree latency (:func:`~.tuning.tree_latency_us`: the fixed cost grows with the
  tree's depth as RCCL's estimate says) and ``k`` the busiest node's share (1 on two nodes, 2
  from three: NCCL's double binary tree). Fitted on the two 2 x 8 MI355X tables with these
  sizes (two clusters, RCCL 2.26.6 and 2.27.7: :data:`TREE_FIT`) and judged on each with the
  term refitted on the other (:func:`~distlab.evidence.rccl.judged.judge`, leave-one-out); beyond
  two nodes no table judges it. gfx942 (MI300X, MI325X) takes the same constants, fitted on gfx950
  only
  (:data:`TREE_FIT_ARCHS`): the tree's rate is neither xGMI- nor NIC-bound, and the nodes' NICs
  are the same. The one citable gfx942 table with these sizes (2 x 8 MI300X, RCCL 2.22.3) has a
  220 us floor and takes 0.9-5.5x the model's time there, which
  :func:`~distlab.evidence.rccl.judged.tree_note` says; a 2 x 8 MI308X run at RCCL 2.27.7 (no
  citable source, docs/research/2026-11-27-rccl.md 4.15) starts at 41 us as
  the MI355X clusters do, so that table is not followed.

Not priced, each with its reason in the row: LL/LL128 rings across nodes and a one-node ring in
LL (MSCCL off).

**gfx950** (MI350X, MI355X; ``arch="gfx950"``): RCCL's choice from its table 6, timed with the
constants above. Across nodes the ring is bound by the node's NICs (the same 400 Gb/s NIC per
GPU as the MI300X fit), not by xGMI. On one node MSCCL's allpairs and the ring move over xGMI:
their rates (``msccl_link_gbps``, ``xgmi_efficiency x 336 GB/s``) are the gfx942 fit's times
the ratio of one link's speed each way, :data:`~distlab.rccl.tuning.XGMI_LINK_SPEC_GBPS`
(76.8 / 64 = 1.2; the MI355X figure is third-party), and the fixed costs are gfx942's
(:func:`xgmi_scale`, :func:`one_node_note`). Only the tree across nodes is fitted on gfx950
tables (:func:`~distlab.evidence.rccl.judged.fit_tree`); every other term's fit refuses them, and
the held-out MI355X tables judge those.

The constants (:data:`SHIPPED`) are fitted by :func:`~distlab.evidence.rccl.judged.fit_constants` on
the ``calibration`` tables of ``data/published.json`` (8 x MI300X one node; 2 x 8 MI300X, its ring
sizes) and, for
the tree across nodes, on the tree sizes of the held-out tables that list it in their ``fits``
(:data:`TREE_FIT`), each a weighted least squares on relative error;
:func:`~distlab.evidence.rccl.judged.judge` prices every table. Units: bytes,
seconds at the public functions; microseconds and GB/s (1e9 bytes/s) in the constants.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from distlab._checks import check_instance
from distlab.links import check_nic_gbps
from distlab.rccl.tables import DEFAULT_ARCH
from distlab.rccl.tuning import (
    GPUS_PER_NODE,
    XGMI_BUS_GBPS,
    XGMI_LINK_SPEC_GBPS,
    RcclChoice,
    rccl_allreduce_choices,
    tree_latency_us,
)
from distlab.vocabulary import busbw_factor, gb_per_s

__all__ = ["FITTED_ARCHS", "LINE_BYTES", "ONE_NODE_ARCHS", "SHIPPED", "TREE_FIT",
           "TREE_FIT_ARCHS", "ExecutionConstants", "RcclTime", "one_node_note",
           "rccl_allreduce_times", "xgmi_scale"]

NIC_GBPS = 50.0
"""One 400 Gb/s NIC per GPU (ConnectX-7, Broadcom Thor2, AMD Pollara 400), GB/s."""
JUDGED_FROM_BYTES = 65536
"""Sizes judged: 64 KiB and above, as the NVIDIA model is."""
FITTED_ARCHS: tuple[str, ...] = ("gfx942",)
"""The architectures whose published tables the constants may be fitted on."""
ONE_NODE_ARCHS: tuple[str, ...] = ("gfx942", "gfx950")
"""The architectures whose one-node allreduce (MSCCL, the ring over xGMI) is priced: gfx942,
where the constants are fitted, and gfx950 at :func:`xgmi_scale` of their rates."""
TREE_FIT_ARCHS: tuple[str, ...] = ("gfx950",)
"""The architectures whose tables the tree across nodes may be fitted on: gfx950, where two
published clusters time it; gfx942 is priced with the same constants (module doc)."""
TREE_FIT = "tree across nodes"
"""The word a published table's ``fits`` list names when its tree sizes fit the tree term."""
LINE_BYTES: dict[str, float] = {"LL": 2.0, "LL128": 128 / 120, "Simple": 1.0}
"""Bytes on the wire per data byte per protocol: LL sends 8 data bytes in each 16-byte line
(a flag beside each word), LL128 120 in each 128, Simple only data."""


def xgmi_scale(arch: str) -> float:
    """How many times a gfx942 xGMI link's speed (where the one-node rates are fitted) one link
    of ``arch`` moves, from :data:`~distlab.rccl.tuning.XGMI_LINK_SPEC_GBPS` (1 for gfx942)."""
    return XGMI_LINK_SPEC_GBPS[arch] / XGMI_LINK_SPEC_GBPS[FITTED_ARCHS[0]]


def one_node_note(arch: str) -> str:
    """What a one-node time on ``arch`` rests on, one line; ``""`` where it is fitted."""
    if arch in FITTED_ARCHS:
        return ""
    return (f"{arch} on one node: the xGMI rates fitted on {FITTED_ARCHS[0]} x "
            f"{xgmi_scale(arch):.2f} (one link's speed each way, {XGMI_LINK_SPEC_GBPS[arch]:g} "
            f"over {XGMI_LINK_SPEC_GBPS[FITTED_ARCHS[0]]:g} GB/s; the gfx950 figure is "
            f"third-party), their fixed costs as fitted")


@dataclass(frozen=True)
class ExecutionConstants:
    """The fitted constants of the execution model (module doc).

    Attributes:
        msccl_fixed_us: MSCCL allpairs' fixed cost per protocol (``"LL"``, ``"Simple"``), us.
        msccl_link_gbps: what one xGMI link moves under MSCCL Simple, GB/s.
        ring_fixed_us, xgmi_efficiency: a one-node ring's fixed cost (us) and its bus bandwidth
            over the seven links' 336 GB/s.
        net_ring_fixed_us, net_efficiency: a ring across nodes: fixed cost (us) and bus
            bandwidth over the node's NICs.
        tree_net_fixed_us, tree_net_gbps: the tree across two nodes: fixed cost (us) and the
            rate a node's partial sum leaves it at (GB/s of wire bytes).
        source: what they were fitted on.
    """

    msccl_fixed_us: dict[str, float]
    msccl_link_gbps: float
    ring_fixed_us: float
    xgmi_efficiency: float
    net_ring_fixed_us: float
    net_efficiency: float
    tree_net_fixed_us: float
    tree_net_gbps: float
    source: str


SHIPPED = ExecutionConstants(
    msccl_fixed_us={"LL": 13.98, "Simple": 22.04}, msccl_link_gbps=34.0,
    ring_fixed_us=60.79, xgmi_efficiency=0.9424,
    net_ring_fixed_us=286.6, net_efficiency=0.895,
    tree_net_fixed_us=60.47, tree_net_gbps=142.66,
    source="fit_constants on the calibration tables of "
           "distlab/evidence/rccl/data/published.json (aac8_mi300x_1node, aac10_mi300x_2node); "
           "the tree across nodes on aac14_mi355x_2node, alib_mi355x_2node")
"""What :func:`~distlab.evidence.rccl.judged.fit_constants` gives on the calibration tables (a test
refits and compares)."""


@dataclass(frozen=True)
class RcclTime:
    """One size: RCCL's choice, the modelled seconds (``None`` where not priced, ``why``
    saying so) and nccl-tests' bus bandwidth of them (GB/s)."""

    choice: RcclChoice
    seconds: float | None
    why: str

    @property
    def busbw_gbps(self) -> float | None:
        if self.seconds is None:
            return None
        n = self.choice.nodes * GPUS_PER_NODE
        return float(gb_per_s(_bus_bytes(self.choice.nbytes, n), self.seconds))


def _bus_bytes(nbytes: int, n: int) -> float:
    """The bytes nccl-tests' bus bandwidth counts for an allreduce of ``nbytes`` on ``n``."""
    factor = busbw_factor("all_reduce", n)
    assert factor is not None   # an allreduce moves data
    return nbytes * factor


def _msccl_link_bytes(nbytes: int, protocol: str) -> float:
    """Bytes one xGMI link carries in MSCCL's allpairs, LL counted at its line size."""
    return 2 * nbytes / GPUS_PER_NODE * (2.0 if protocol == "LL" else 1.0)


def _tree_net_us(c: RcclChoice, k: ExecutionConstants, nic_gbps: float,
                 release: str | None) -> float:
    """The tree across ``c.nodes`` nodes (module doc), us."""
    wire = c.nbytes * LINE_BYTES[c.protocol]
    depth = (tree_latency_us(c.nodes, c.protocol, release=release, arch=c.arch)
             / tree_latency_us(2, c.protocol, release=release, arch=c.arch))
    busiest = 1 if c.nodes == 2 else 2
    nics = k.net_efficiency * GPUS_PER_NODE * nic_gbps
    return k.tree_net_fixed_us * depth + max(wire / (1e3 * k.tree_net_gbps),
                                             busiest * wire / (1e3 * nics))


def _price(c: RcclChoice, k: ExecutionConstants, nic_gbps: float,
           release: str | None = None) -> tuple[float | None, str]:
    n = c.nodes * GPUS_PER_NODE
    if c.nodes == 1 and c.arch not in ONE_NODE_ARCHS:
        return None, f"{c.arch} on one node: not priced"
    if c.path == "msccl":
        link = k.msccl_link_gbps * xgmi_scale(c.arch)
        us = k.msccl_fixed_us[c.protocol] + _msccl_link_bytes(c.nbytes, c.protocol) / (1e3 * link)
        return us * 1e-6, ""
    if c.algorithm == "ring" and c.protocol == "Simple":
        if c.nodes == 1:
            bus = k.xgmi_efficiency * XGMI_BUS_GBPS * xgmi_scale(c.arch)
            return (k.ring_fixed_us + _bus_bytes(c.nbytes, n) / (1e3 * bus)) * 1e-6, ""
        bus = k.net_efficiency * GPUS_PER_NODE * nic_gbps
        return (k.net_ring_fixed_us + _bus_bytes(c.nbytes, n) / (1e3 * bus)) * 1e-6, ""
    if c.nodes == 1:
        return None, f"ring/{c.protocol} on one node (MSCCL off): not priced"
    if c.algorithm == "tree":
        return _tree_net_us(c, k, nic_gbps, release) * 1e-6, ""
    return None, (f"{c.algorithm}/{c.protocol} across nodes: not priced, no held table judges "
                  "its time (docs/research/2026-11-27-rccl.md)")


def rccl_allreduce_times(nodes: int, sizes_bytes: Sequence[int], *, release: str | None = None,
                         msccl: bool = True, dtype: Any = "float32", amd_host: bool = True,
                         nic_gbps: float = NIC_GBPS,
                         constants: ExecutionConstants = SHIPPED,
                         arch: str = DEFAULT_ARCH) -> tuple[list[RcclTime], str]:
    """RCCL's choice at each size and the time the execution model gives it.

    Arguments as :func:`~.tuning.rccl_allreduce_choices` (``arch``: ``"gfx942"`` or
    ``"gfx950"``, whose one node is priced at :func:`xgmi_scale`); ``nic_gbps``: one NIC's
    rate in GB/s (bytes; one NIC per GPU), in ``(0, 100]``
    (:func:`distlab.links.check_nic_gbps`: a 400 Gb/s NIC is 50); ``constants``: an
    :class:`ExecutionConstants`. Returns the rows and the release note. Every argument is
    checked as the command checks it, before anything is priced.
    """
    nic_gbps = check_nic_gbps(nic_gbps)
    check_instance("constants", constants, ExecutionConstants)
    choices, note = rccl_allreduce_choices(nodes, sizes_bytes, release=release, msccl=msccl,
                                           dtype=dtype, amd_host=amd_host, arch=arch)
    rows = []
    for c in choices:
        seconds, why = _price(c, constants, float(nic_gbps), release)
        rows.append(RcclTime(c, seconds, why))
    return rows, note
