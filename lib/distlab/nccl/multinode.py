"""NCCL's allreduce across nodes: the network presets, the graphs, and NCCL's tuning model.

``nodes`` boxes of :class:`~distlab.nccl.boxes.GpuBox` joined by a
:class:`Network` (``rails`` NICs per node, one per GPU on the rail-optimized boxes users run).
What NCCL does there, from NVIDIA/nccl ``v2.28.9-1``:

- **graphs** (``src/graph/search.cc`` ``ncclTopoCompute``): a ring or tree channel enters and
  leaves each node through a NIC, at one speed of NCCL's inter-node speed table
  (``speedArrayInter``, ``sm90SpeedArrayInter``, ``sm100SpeedArrayInter``). The search settles
  on the speed whose channels carry the most (``channels * speed``), the channels fitting both
  the NICs (``floor(nic / speed)`` per NIC) and every GPU's own link (every channel passes
  through each GPU of the node); NIC bandwidth is
  ``mbps / 8000`` GB/s (``src/graph/topo.cc`` ``ncclTopoAddNet``). At run time the ring
  channels are doubled (``src/graph/connect.cc`` ``ncclTopoPostset``), and doubled again on
  compute capability >= 9.0 when the ring speed is above 45 GB/s and fewer than 16 channels.
  The tree graph raises its intra-node speed above the network's, up to twice it, while the
  GPUs' links carry it (:func:`tree_intra_speed`); on two nodes NCCL prices the tree at it.
- **bandwidth** (``src/graph/tuning.cc`` ``ncclTopoTuneModel``): ``nChannels * bw`` with ``bw``
  the intra speed on up to two nodes and the inter speed beyond; ring LL half of it at most
  ``llMaxBws`` of the CPU vendor's row; ring LL128 0.92, capped per channel; tree 0.92 capped
  per channel, LL ``/3.8``, LL128 ``120/128``; NVLS-Tree the NVLS intra bandwidth against
  twice (two nodes) or once the inter speed, capped by ``perChMaxNVLSTreeBws``. The columns
  of the per-channel tables are ``N2`` (two nodes) and ``N4`` (more).
- **latency**: ring ``base + (2(n-1) - 2(nodes-1)) * max(intra hop, net overhead) +
  2(nodes-1) * net hop`` (net overhead ``getNetOverhead``: 1 us on Intel, 2 on AMD, times 3
  for Simple); tree ``base + 2((ppn-1) * intra hop + log2(nodes) * net hop)``; NVLS-Tree
  ``25 + 2 log2(nodes) * 20.9`` (the net hop is 14 us from 2.20.5 to 2.27.5 and 19 in 2.18.5:
  :func:`nvls_tree_latency_us`). ``ncclTopoGetAlgoTime`` multiplies a Simple ring's latency by
  1.4 (compute capability >= 8.0; 1.9 before) once ``nbytes / (nChannels * nRanks) >= 64``.
- **algorithms**: ring, tree and, with NVLink SHARP and a network, NVLS-Tree; NVLS alone across
  nodes needs SHARP in the network (CollNet), which these presets do not have; PAT needs one GPU
  per node.

- **the network as NCCL holds it** (:meth:`Network.nccl_devices`): the ports of one multi-port
  NIC are one device of their summed speed from 2.20 on (``NCCL_IB_MERGE_NICS``, then NIC
  fusion at ``NCCL_NET_MERGE_LEVEL=PORT``); AWS's plugin groups a GPU's EFA devices into one
  on p5 and later. A plugin's ``props->latency`` (aws-ofi-nccl: 75 us on p4d and p5, 35 on
  p5en and p6) is added to each network hop of NCCL's estimate, twice for Simple; it is 0 for
  NCCL's own IB and socket transports and taken as 0 for Google's TCPXO plugin. It steers the
  choice; a run's network hop is NCCL's table's or, on EFA, the plugin's own tuner's measured
  hop (20 us on p5, 18 on p5en, +3 for Simple) where that is longer.
- **what AWS's plugin changes in the run** (:mod:`~distlab.nccl.netplugin`): on p4d / p4de it
  sets ``NCCL_PROTO=simple`` (EFA v1 gives no 128-byte in-order delivery), so NCCL chooses
  among Simple pairs only (:attr:`Network.nccl_protocols`; an explicit ``protocols`` wins); on
  p5 and later a message under 128 KiB crosses on one port of its grouped device (each
  network hop of a tree's fill, each network step of a ring, pays the extra wire time:
  :meth:`Network.stripe_delay_us`), and NVLS-Tree's chunk starts at the plugin's 512 KiB
  (:func:`nvls_tree_chunk`).

Nothing here is fitted. Every term is NCCL 2.28.9's but for the Blackwell rows that moved in
2.29.7 and 2.30.7 (the ring LL128 cap, the inter-node speed table, the NVLS-Tree cap and its
tree correction: :mod:`~distlab.nccl.versions`) and NVLS-Tree's latency,
which follow the release asked.

As it runs (:func:`multinode_execution`): a ring's hops hide under its copies
(:func:`ring_exposed_latency_us`); a tree pays its pipeline fill once, as NCCL's hop latency or
as the first steps' waits, whichever is longer (:func:`tree_fill_sync_us`); NVLS-Tree pays its
pipeline fill (:func:`nvls_tree_fill_us`) instead of the NVLS step waits; a ring moves at the
graph its NVLinks allow at their specified bandwidth (``multinode_graphs(..., physical=True)``),
which the NICs bound.

GB200 NVL72 racks: NCCL takes one multi-node NVLink domain as one node (MNNVL), so a rack is one
"node" of the ``gb200_nvl72`` box and racks are joined by a network (``ib_ndr400_nvl72``: one
NIC per GPU). NCCL's CollNet (SHARP in the switches) is off by default and not modelled:
``ib_ndr400x8_sharp`` prices NCCL's default run.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from distlab._checks import check_choice, check_float, check_int
from distlab.links import check_nic_gbps
from distlab.nccl.boxes import BoxLike, GpuBox, box_graphs, gpu_box
from distlab.nccl.netplugin import (
    PLUGIN_MIN_STRIPE_BYTES,
    PLUGIN_NVLS_CHUNK_BYTES,
    SENDRECV_PROTOCOLS,
    stripe_delay_us,
    wire_bytes,
)
from distlab.nccl.per_size import (
    HARNESSES,
    MAX_CHANNELS,
    NVLS_CHUNK_BYTES,
    Channels,
    Execution,
    ExecutionConstants,
    Pick,
    allreduce_steps,
    chunk_bytes,
    launched_channels,
    nvls_channels,
    pick_of,
    run_size,
    shipped_constants,
)
from distlab.nccl.tuning import (
    BASE_LATENCY_US,
    HOP_LATENCY_US,
    LL128_DATA_FRACTION,
    NVLS_EFFICIENCY,
    TREE_CORRECTION,
    TREE_EFFICIENCY,
    TREE_LL_FRACTION,
    Candidate,
    Choice,
    TuningEntry,
    check_subset,
    price_entry,
)
from distlab.nccl.versions import NcclConstants, constants_or_none

__all__ = ["NETWORKS", "MultinodeGraph", "MultinodeLayout", "Network", "multinode_choices",
           "multinode_execution", "multinode_graphs", "multinode_table", "net_hop_us", "network",
           "node_choices", "node_table", "nvls_tree_chunk", "nvls_tree_latency_us",
           "nvls_tree_fill_us", "ring_exposed_latency_us", "tree_fill_sync_us", "tree_intra_speed",
           "usable_devices"]


@dataclass(frozen=True)
class Network:
    """The network between nodes.

    Attributes:
        key: short name (the key of :data:`NETWORKS`).
        name: what it is.
        nic_gbps: GB/s (bytes) per physical port per direction as NCCL reads it (``mbps /
            8000``), in ``(0, 100]``: a 400 Gb/s port is 50.
        rails: physical ports per node.
        source: where the figures come from.
        ports_per_device: ports NCCL reads as one device of their summed speed (1: none).
        merged_by: who merges them: ``"nccl"`` (the ports of one multi-port NIC: NCCL's IB
            transport from 2.20, ``NCCL_IB_MERGE_NICS`` default 1 in
            ``src/transport/net_ib.cc``, and from 2.24 its NIC fusion,
            ``NCCL_NET_MERGE_LEVEL`` default ``PORT`` in ``src/graph/topo.cc``) or
            ``"plugin"`` (AWS's aws-ofi-nccl RDMA protocol groups a GPU's EFA devices into one
            device and scales its speed by the group, ``src/nccl_ofi_rdma.cpp``, whatever the
            NCCL release).
        plugin_latency_us: ``props->latency`` the net plugin reports, us (0 for NCCL's own IB
            and socket transports); NCCL adds it to each network hop of its estimate, twice for
            Simple (``src/graph/tuning.cc``: ``interLat += graphs[a]->latencyInter``).
        hop_floor_us: the transport's measured one-hop latency, us, where it is longer than the
            InfiniBand hop NCCL's table holds (0: NCCL's table): a run's network hop is at least
            this, plus :data:`SIMPLE_COMPLETION_US` for Simple.
        nccl_protocols: the ``NCCL_PROTO`` the plugin sets when the user sets none (empty:
            NCCL's own): ``("Simple",)`` on EFA v1 under aws-ofi-nccl's SENDRECV protocol
            (:data:`~distlab.nccl.netplugin.SENDRECV_PROTOCOLS`); an explicit ``protocols``
            wins, as a user's ``NCCL_PROTO`` does.
        min_stripe_bytes: the plugin's stripe threshold on a grouped device (0: none): a
            message under it crosses on one of the device's ``ports_per_device`` ports
            (:func:`~distlab.nccl.netplugin.stripe_delay_us`).
        nvls_chunk_bytes: ``NCCL_NVLS_CHUNKSIZE`` / ``NCCL_NVLSTREE_MAX_CHUNKSIZE`` as the plugin
            sets them (0: NCCL's defaults, 128 KiB and 64 KiB from 4 nodes on).
    """

    key: str
    name: str
    nic_gbps: float
    rails: int
    source: str
    ports_per_device: int = 1
    merged_by: str = ""
    plugin_latency_us: float = 0.0
    hop_floor_us: float = 0.0
    nccl_protocols: tuple[str, ...] = ()
    min_stripe_bytes: int = 0
    nvls_chunk_bytes: int = 0

    def __post_init__(self) -> None:
        """A port's rate in GB/s within :func:`distlab.links.check_nic_gbps`'s range (a rate
        in Gb/s is refused, naming the unit), whole numbers of ports, each checked at once."""
        check_nic_gbps(self.nic_gbps)
        check_int("rails (ports per node)", self.rails, minimum=1)
        check_int("ports_per_device", self.ports_per_device, minimum=1, maximum=self.rails)
        check_float("plugin_latency_us", self.plugin_latency_us, minimum=0.0)
        check_float("hop_floor_us", self.hop_floor_us, minimum=0.0)
        check_int("min_stripe_bytes", self.min_stripe_bytes, minimum=0)
        check_int("nvls_chunk_bytes", self.nvls_chunk_bytes, minimum=0)

    def nccl_devices(self, version: NcclConstants | None = None) -> tuple[int, float]:
        """``(devices, GB/s each)`` per node as NCCL's topology holds them under ``version``
        (``None``: 2.28.9): merged ports count as one device of their summed speed; NCCL merges
        ports itself from 2.20 on, a plugin always."""
        merged = self.ports_per_device > 1 and (
            self.merged_by == "plugin" or version is None
            or version.parsed_release.minor >= MERGE_FROM_MINOR)
        if not merged:
            return self.rails, self.nic_gbps
        return self.rails // self.ports_per_device, self.nic_gbps * self.ports_per_device

    def gbps_per_gpu(self, gpus_per_node: int) -> float:
        """GB/s one GPU's messages to other nodes cross on, each way, when every GPU of a node
        of ``gpus_per_node`` sends at once (an all-to-all's messages each take one NIC: S.
        Jeaugey, NVIDIA/nccl-tests#267): one NCCL device's rate (:meth:`nccl_devices`, ports
        merged as NCCL 2.28.9 merges them), shared where the node has fewer devices than
        GPUs."""
        gpus_per_node = check_int("gpus_per_node", gpus_per_node, minimum=1)
        devices, gbps = self.nccl_devices()
        return gbps * min(1.0, devices / gpus_per_node)

    def stripe_delay_us(self, message_bytes: float) -> float:
        """What one message of ``message_bytes`` on the wire loses to the plugin's stripe
        threshold, us (:func:`~distlab.nccl.netplugin.stripe_delay_us` over the ports of one
        plugin-grouped device; 0 without a threshold)."""
        if self.merged_by != "plugin" or not self.min_stripe_bytes:
            return 0.0
        return stripe_delay_us(message_bytes, self.nic_gbps, self.ports_per_device,
                               self.min_stripe_bytes)

    def protocols(self, asked: Iterable[str] | None) -> Iterable[str] | None:
        """The protocols NCCL may use: ``asked`` where given (a user's ``NCCL_PROTO``), else
        the plugin's :attr:`nccl_protocols` where it sets them, else ``None`` (every one)."""
        if asked is None and self.nccl_protocols:
            return self.nccl_protocols
        return asked


SIMPLE_COMPLETION_US = 3.0
"""What a Simple hop adds over a transport's 8-byte latency: the completion's way through the
plugin and NCCL's proxy (aws-ofi-nccl's tuner, ``OFI_NCCL_TUNER_NET_COMP_OVERHEAD`` default 3 us,
``include/nccl_ofi_param.h``)."""

MERGE_FROM_MINOR = 20
"""NCCL 2.20 is the first release that merges a multi-port NIC's ports into one device
(``NCCL_IB_MERGE_NICS``, ``src/transport/net_ib.cc``; not in 2.19.3)."""


NETWORKS: dict[str, Network] = {
    "ib_ndr400x8": Network("ib_ndr400x8",
                           "InfiniBand NDR 400 Gb/s, 8 rails (one ConnectX-7 per GPU)", 50.0, 8,
                           "NDR x4 = 400000 Mb/s; NCCL: 400000 / 8000 = 50 GB/s"),
    "ib_hdr200x8": Network("ib_hdr200x8", "InfiniBand HDR 200 Gb/s, 8 rails (DGX A100)", 25.0, 8,
                           "HDR x4 = 200000 Mb/s; NCCL: 25 GB/s"),
    "roce400x8": Network("roce400x8", "RoCE v2 400 Gb/s, 8 rails", 50.0, 8,
                         "400 GbE through ibverbs: NCCL reads it as IB, 50 GB/s"),
    "roce200x16": Network("roce200x16", "RoCE v2 200 Gb/s, 16 ports (OCI BM.GPU.H100.8)", 25.0, 16,
                          "OCI's H100 shape: 16 x 200 Gb/s RDMA, two ports of a ConnectX-7 per "
                          "GPU; NCCL: 200000 / 8000 = 25 GB/s a port, from 2.20 one device of "
                          "50 GB/s per NIC (its 2-node busbw, 464 GB/s with NCCL 2.21.5, is "
                          "the 8 x 400 Gb/s InfiniBand box's, which 25 GB/s heads cannot reach)",
                          ports_per_device=2, merged_by="nccl"),
    "roce100x16": Network("roce100x16", "RoCE v2 100 Gb/s, 16 ports (OCI BM.GPU4.8, A100)", 12.5,
                          16, "OCI's A100 shape: 16 x 100 Gb/s RDMA, two ports of a ConnectX-6 "
                          "per GPU; NCCL: 12.5 GB/s a port, from 2.20 25 GB/s per NIC",
                          ports_per_device=2, merged_by="nccl"),
    "efa3200": Network("efa3200", "AWS EFA v2, 32 x 100 Gb/s per node (p5, p5e)", 12.5, 32,
                       "p5.48xlarge: 3200 Gb/s in 32 EFA devices of 100 Gb/s; aws-ofi-nccl's "
                       "RDMA protocol (p5's default, src/platform-aws.cpp) groups a GPU's 4 into "
                       "one NCCL device of 400 Gb/s (src/nccl_ofi_rdma.cpp) and reports a "
                       "75 us latency; one hop takes 20 us (its tuner's p5 model: '2 nodes, 8B "
                       "RDMA w/imm lat', src/tuner/nccl_ofi_model.cpp)",
                       ports_per_device=4, merged_by="plugin", plugin_latency_us=75.0,
                       hop_floor_us=20.0, min_stripe_bytes=PLUGIN_MIN_STRIPE_BYTES,
                       nvls_chunk_bytes=PLUGIN_NVLS_CHUNK_BYTES),
    "efa400": Network("efa400", "AWS EFA v1, 4 x 100 Gb/s per node (p4d / p4de)", 12.5, 4,
                      "AWS p4d.24xlarge / p4de.24xlarge: 400 Gb/s in 4 EFA devices of 100 Gb/s "
                      "(Amazon EC2 P4 instances page); NCCL: 100000 / 8000 = 12.5 GB/s; "
                      "aws-ofi-nccl's SENDRECV protocol there (no grouping) reports a 75 us "
                      "latency (src/platform-aws.cpp); one hop taken as p5's 20 us (the "
                      "plugin's tuner models no p4d); EFA v1 gives no 128-byte in-order "
                      "delivery, so the plugin sets NCCL_PROTO=simple (distlab.nccl.netplugin)",
                      plugin_latency_us=75.0, hop_floor_us=20.0,
                      nccl_protocols=SENDRECV_PROTOCOLS),
    "efa3200_p5en": Network("efa3200_p5en", "AWS EFA v3, 16 x 200 Gb/s per node (p5en, p6)",
                            25.0, 16,
                            "AWS p5en.48xlarge: 3200 Gb/s in 16 EFA v3 devices of 200 Gb/s "
                            "(Amazon EC2 P5 instances page; p6-b200 the same); NCCL: 25 GB/s; "
                            "aws-ofi-nccl's RDMA protocol groups a GPU's 2 into one device of "
                            "400 Gb/s and reports a 35 us latency (src/platform-aws.cpp); one hop "
                            "takes 18 us (its tuner's p5en model)",
                            ports_per_device=2, merged_by="plugin", plugin_latency_us=35.0,
                            hop_floor_us=18.0, min_stripe_bytes=PLUGIN_MIN_STRIPE_BYTES,
                            nvls_chunk_bytes=PLUGIN_NVLS_CHUNK_BYTES),
    "gcp_tcpxo": Network("gcp_tcpxo", "GCP A3 Mega GPUDirect-TCPXO, 8 x 200 Gb/s per node",
                         25.0, 8,
                         "Google Cloud A3 Mega (a3-megagpu-8g): 8 NICs of 200 Gb/s for GPU "
                         "traffic, 1600 Gb/s, through the TCPXO (FasTrak) NCCL net plugin "
                         "(GCP GPU machine types page); NCCL: 200000 / 8000 = 25 GB/s"),
    "gcp_roce400x8": Network("gcp_roce400x8",
                             "GCP A3 Ultra / A4 RoCE, 8 x 400 Gb/s ConnectX-7 per node", 50.0, 8,
                             "Google Cloud A3 Ultra (a3-ultragpu-8g, H200) and A4 (a4-highgpu-8g, "
                             "B200): 8 ConnectX-7 NICs of 400 Gb/s, RDMA over Converged Ethernet "
                             "(GCP GPU machine types page); NCCL reads them as IB, 50 GB/s"),
    "ib_ndr400x8_sharp": Network(
        "ib_ndr400x8_sharp", "InfiniBand NDR 400 Gb/s, 8 rails, SHARP-capable switches", 50.0, 8,
        "As ib_ndr400x8. NCCL uses SHARP only through CollNet (CollNet Direct / Chain, and NVLS "
        "with CollNet), which needs the SHARP net plugin and NCCL_COLLNET_ENABLE=1 (src/init.cc: "
        "the collnetEnable config defaults to 0, NCCL_CONFIG_DEFAULT(..., collnetEnable, ..., "
        "0): off by default); NCCL's default run "
        "on this network is the one priced (ring, tree, NVLS-Tree). Not priced: a CollNet run"),
    "ib_ndr400_nvl72": Network(
        "ib_ndr400_nvl72", "InfiniBand NDR 400 Gb/s, one ConnectX-7 per GPU of a GB200 NVL72 "
        "domain (72 per domain)", 50.0, 72,
        "NVIDIA GB200 NVL72 reference architecture: each compute tray carries 4 ConnectX-7 "
        "400 Gb/s NICs (one per GPU) for the compute fabric, 72 per rack; NCCL: 50 GB/s each. "
        "Across racks NCCL takes each NVLink domain as one node (MNNVL)"),
    "tcp100": Network("tcp100", "100 Gb/s Ethernet, one NIC, NCCL's socket transport", 12.5, 1,
                      "100000 Mb/s / 8000 = 12.5 GB/s"),
}
"""The network presets ``predict_builtin(..., network=...)`` takes."""

#: ``speedArrayInter`` / ``sm90SpeedArrayInter`` / ``sm100SpeedArrayInter``
#: (``src/graph/search.cc``), GB/s per channel, tried from the first.
SPEEDS_INTER = {
    "ampere": (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0,
               3.0, 2.4, 1.2, 0.24, 0.12),
    "hopper": (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4,
               1.2, 0.24, 0.12),
    "blackwell": (96.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0,
                  3.0, 2.4, 1.2, 0.24, 0.12),
}
#: Multi-node columns (N2, N4) of ``ncclTunerConstantsDefaults`` (``src/graph/tuning.cc``).
LL_MAX_BY_VENDOR = {"intel": (39.0, 20.4), "amd": (22.5, 19.0), "arm": (39.0, 20.4)}
"""(``llMaxBws[index1]``: index1 is 1 for an AMD CPU, else 0: an Arm CPU reads Intel's row.)"""
RING_LL128_PER_CHANNEL = {"ampere": (20.0, 20.0), "hopper": (36.7, 36.7),
                          "blackwell": (34.6, 2 * 36.7)}
TREE_PER_CHANNEL = {"ampere": (23.6, 17.8), "hopper": (41.4, 36.0), "blackwell": (42.8, 24.0)}
TREE_LL128_PER_CHANNEL = {"ampere": (20.0, 20.0), "hopper": (36.7, 29.0),
                          "blackwell": (31.67, 20.0)}
NVLS_TREE_PER_CHANNEL = {"hopper": (57.7, 45.5), "blackwell": (96.0, 43.8)}
NET_HOP_US = {("tree", "LL"): 5.0, ("tree", "LL128"): 8.5, ("tree", "Simple"): 14.0,
              ("ring", "LL"): 2.7, ("ring", "LL128"): 4.0, ("ring", "Simple"): 14.0,
              ("nvls_tree", "Simple"): 20.9}
"""``hwLatencies[NCCL_HW_NET]`` (``src/graph/tuning.cc``), us per network hop."""
NVLS_TREE_INTRA_US = 25.0
"""``hwLatencies[NCCL_HW_NVLINK][NVLS_TREE]``, us."""
NET_OVERHEAD_US = {"intel": 1.0, "amd": 2.0, "arm": 1.0}
"""``getNetOverhead`` (``src/graph/tuning.cc``): the floor of a ring's intra-node step latency
across nodes, us (times 3 for Simple)."""
RING_SIMPLE_PLATEAU = 1.4
"""``ncclTopoGetAlgoTime``: "Plateau effect of ring", compute capability >= 8.0."""

ALGORITHMS = ("tree", "ring", "nvls_tree")
"""NCCL's multi-node allreduce algorithms modelled, in its enum order."""


@dataclass(frozen=True)
class MultinodeGraph:
    """What NCCL's search settles on across nodes: ``n_channels`` channels of ``speed_gbps``
    (intra and inter alike), ``runtime_channels`` after the run-time duplication;
    ``tree_intra_gbps``: the tree graph's speed inside a node, which NCCL's search raises
    above the network's (up to twice it) while the GPUs' links carry it, and which its tuning
    reads on two nodes (``src/graph/search.cc`` "increase bwIntra for trees (2 nodes or
    collnet)"; ``src/graph/tuning.cc``: ``bw = nNodes <= 2 ? bwIntra : bwInter``); 0: the
    same as ``speed_gbps``."""

    n_channels: int
    speed_gbps: float
    runtime_channels: int
    tree_intra_gbps: float = 0.0


def network(net: Network | str) -> Network:
    """``net`` itself if it is a :class:`Network`, else the preset of :data:`NETWORKS`."""
    if isinstance(net, Network):
        return net
    return NETWORKS[check_choice("network", net, NETWORKS)]


def _blackwell_row(version: NcclConstants | None, field: str,
                   default: tuple[float, ...]) -> tuple[float, ...]:
    """A per-release Blackwell row of :class:`~distlab.nccl.versions.NcclConstants`
    (``None``: ``default``, 2.28.9's)."""
    return default if version is None else tuple(getattr(version, field))


def usable_devices(devices: int, box: GpuBox, gpus_per_node: int | None) -> int:
    """The network devices of a node that a communicator with ``gpus_per_node`` of the box's
    GPUs on it reaches (``None``: every GPU): the rail-optimized boxes give each GPU its own
    NICs on its PCIe switch, NCCL's search keeps a GPU's traffic on the NICs closest to it, and
    PXN (sending from another GPU's NIC over NVLink) needs that GPU's rank in the communicator,
    so a node with ``g`` of ``G`` GPUs uses ``ceil(devices * g / G)`` of its ``devices``."""
    if gpus_per_node is None or gpus_per_node >= box.gpus:
        return devices
    return max(1, math.ceil(devices * gpus_per_node / box.gpus))


def multinode_graphs(box: GpuBox, nodes: int, net: Network, *,
                     version: NcclConstants | None = None,
                     physical: bool = False, gpus_per_node: int | None = None) -> MultinodeGraph:
    """The ring (and tree) graph across ``nodes`` nodes (see the module doc) over the network's
    devices as NCCL holds them (:meth:`Network.nccl_devices`), those the communicator's
    ``gpus_per_node`` GPUs of each node reach (:func:`usable_devices`; ``None``: the whole
    box); ``version``: the release whose Blackwell inter-node speed table and port merging
    apply (``None``: 2.28.9).
    ``physical``: each GPU's NVLink at its specified bandwidth (``link_gbps``) instead of
    NCCL's per-link figure, the graph the run is bound by (NCCL's search plans with
    ``SM90_NVLINK_BW`` 20.6 GB/s a link where NVLink 4 moves 25; PCIe boxes keep NCCL's)."""
    link = box.nccl_link_gbps
    if physical and box.fabric == "nvswitch":
        link = box.link_gbps
    devices, device_gbps = net.nccl_devices(version)
    devices = usable_devices(devices, box, gpus_per_node)
    best = (1, 0.1)  # slower than every speed NCCL tries: its 0.1 GB/s fallback graph
    speeds = SPEEDS_INTER[box.generation]
    if box.generation == "blackwell":
        speeds = _blackwell_row(version, "sm100_speeds_inter", speeds)
    for speed in speeds:  # keep the most channels x speed (first wins)
        per_nic = math.floor(device_gbps / speed + 1e-9)
        channels = min(devices * per_nic, math.floor(link / (speed * box.p2p_overhead) + 1e-9),
                       MAX_CHANNELS // 2)
        if channels >= 1 and channels * speed > best[0] * best[1]:
            best = (channels, speed)
    channels, speed = best
    runtime = min(MAX_CHANNELS, 2 * channels)
    if box.sm >= 90 and nodes > 1 and speed > 45.0 and runtime < 16:
        runtime = min(MAX_CHANNELS, 2 * runtime)
    return MultinodeGraph(channels, speed, runtime,
                          tree_intra_speed(speeds, channels, speed, link / box.p2p_overhead))


def tree_intra_speed(speeds: Sequence[float], channels: int, speed: float,
                     link_gbps: float) -> float:
    """The tree graph's intra-node speed (``src/graph/search.cc`` ``ncclTopoCompute``, pass 2):
    from the network's ``speed``, the next faster entry of ``speeds`` is tried while the
    current one is under twice the network's, and kept while ``channels`` of it fit the GPU's
    link (``link_gbps``); the first that does not fit ends the search."""
    if speed not in speeds:
        return speed
    i, intra = speeds.index(speed), speed
    while i > 0 and intra < 2 * speed:
        if channels * speeds[i - 1] > link_gbps + 1e-9:
            break
        i -= 1
        intra = speeds[i]
    return intra


def multinode_table(box: BoxLike, world_size: int, nodes: int, net: Network | str, *,
                    algorithms: Iterable[str] | None = None,
                    protocols: Iterable[str] | None = None,
                    version: str | NcclConstants | None = None) -> list[TuningEntry]:
    """NCCL's allreduce tuning table across ``nodes`` nodes of ``box`` (``world_size`` GPUs in
    all, ``world_size / nodes`` per node) over network ``net``: one
    :class:`~distlab.nccl.tuning.TuningEntry` per pair, NCCL's order. ``version``: as
    :func:`multinode_choices`."""
    b, n, nodes, nw, algos, protos = _checked(box, world_size, nodes, net, algorithms, protocols)
    return node_table(b, n, nodes, nw, algos, protos, constants_or_none(version))


def _checked(box: BoxLike, world_size: int, nodes: int, net: Network | str,
             algorithms: Iterable[str] | None, protocols: Iterable[str] | None,
             ) -> tuple[GpuBox, int, int, Network, tuple[str, ...], tuple[str, ...]]:
    """The public functions' arguments resolved and checked, once."""
    b = gpu_box(box)
    nodes = check_int("nodes", nodes, minimum=2)
    n = _per_node(check_int("world_size", world_size, minimum=nodes, maximum=nodes * b.gpus),
                  nodes)
    nw = network(net)
    algos, protos = _restrictions(algorithms, nw.protocols(protocols))
    return b, n, nodes, nw, algos, protos


def _per_node(n: int, nodes: int) -> int:
    """``n``, checked to be the same GPUs on every node."""
    if n % nodes:
        raise ValueError(f"world_size {n} is not a multiple of nodes {nodes}: NCCL's model "
                         "takes the same GPUs per node")
    return n


def _restrictions(algorithms: Iterable[str] | None,
                  protocols: Iterable[str] | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``NCCL_ALGO`` / ``NCCL_PROTO`` as checked tuples (``None``: every one)."""
    return (check_subset("algorithms", algorithms, ALGORITHMS),
            check_subset("protocols", protocols, ("LL", "LL128", "Simple")))


def node_table(b: GpuBox, n: int, nodes: int, nw: Network, algos: tuple[str, ...],
               protos: tuple[str, ...], version: NcclConstants | None) -> list[TuningEntry]:
    """:func:`multinode_table` inside the model: every argument resolved and checked by the
    caller (``n`` a multiple of ``nodes >= 2``)."""
    ppn = n // nodes
    g = multinode_graphs(b, nodes, nw, version=version, gpus_per_node=ppn)
    col = 0 if nodes <= 2 else 1
    out = []
    for a in ALGORITHMS:
        for p in ("LL", "LL128", "Simple"):
            if a == "nvls_tree" and p != "Simple":
                continue
            reason = _reason(b, ppn, a, p, algos, protos)
            bus = 0.0 if reason.startswith("NVLS") else _busbw(b, g, a, p, nodes, ppn, col,
                                                                version)
            ratio = 0.5 if a == "tree" else n / (2 * (n - 1))
            out.append(TuningEntry(a, p, not reason, reason,
                                      _latency(b, a, p, n, ppn, nodes, version,
                                               nw.plugin_latency_us), bus,
                                      bus * ratio))
    return out


def multinode_choices(box: BoxLike, world_size: int, sizes_bytes: Sequence[int], nodes: int,
                      net: Network | str, *, algorithms: Iterable[str] | None = None,
                      protocols: Iterable[str] | None = None,
                      version: str | NcclConstants | None = None) -> list[Choice]:
    """NCCL's choice and estimate per size across nodes (``ncclTopoGetAlgoTime``: the tree
    correction, from 2.29.7 on NVLS-Tree too on Blackwell with an x86 CPU, and the ring's Simple
    plateau). ``version``: an NCCL release or an ``NcclConstants`` whose Blackwell rows apply
    (``None``: 2.28.9)."""
    b, n, nodes, nw, algos, protos = _checked(box, world_size, nodes, net, algorithms, protocols)
    version = constants_or_none(version)
    return node_choices(b, n, sizes_bytes, nodes, nw, algos, protos, version,
                        asked=(algorithms, protocols))


def node_choices(b: GpuBox, world_size: int, sizes_bytes: Sequence[int], nodes: int,
                 nw: Network, algos: tuple[str, ...], protos: tuple[str, ...],
                 version: NcclConstants | None, *,
                 asked: tuple[object, object] | None = None) -> list[Choice]:
    """:func:`multinode_choices` inside the model: every argument but the sizes resolved and
    checked by the caller; ``asked``: the ``algorithms`` and ``protocols`` as given, for the
    error when no pair is left (default: ``algos`` and ``protos``)."""
    table = [e for e in node_table(b, world_size, nodes, nw, algos, protos, version)
             if e.enabled]
    if not table:
        algorithms, protocols = (algos, protos) if asked is None else asked
        raise ValueError(f"no algorithm/protocol available for allreduce across {nodes} nodes "
                         f"with algorithms={algorithms!r}, protocols={protocols!r}")
    runtime = multinode_graphs(b, nodes, nw, version=version,
                               gpus_per_node=world_size // nodes).runtime_channels
    nvls_tree_corrected = (version is not None and version.nvls_tree_correction and b.sm >= 100
                           and b.cpu_vendor in ("intel", "amd"))
    out = []
    for s in sizes_bytes:
        s = check_int("nbytes", s, minimum=1)
        cands = []
        for e in table:
            lat = e.latency_us
            if ((e.algorithm, e.protocol) == ("ring", "Simple") and b.sm >= 80
                    and s // (runtime * world_size) >= 64):
                lat *= RING_SIMPLE_PLATEAU
            c = price_entry(replace(e, latency_us=lat), s)
            if e.algorithm == "nvls_tree" and nvls_tree_corrected:
                c = _corrected(e, lat, s)
            cands.append(Candidate(c.algorithm, c.protocol, c.latency_us, c.algbw_gbps,
                                   c.seconds))
        best = min(cands, key=lambda c: c.seconds)
        out.append(Choice(s, world_size, best.algorithm, best.protocol, best.seconds,
                          tuple(cands)))
    return out


def _corrected(e: TuningEntry, latency_us: float, nbytes: int) -> Candidate:
    """NVLS-Tree priced with the tree correction (``ncclTopoGetAlgoTime``, 2.29.7 on: 24
    entries, the last one 256 MiB to 512 MiB)."""
    bw = e.algbw_gbps
    log_size = int(math.log2(nbytes >> 6)) if nbytes >> 6 else -1
    table = (*TREE_CORRECTION["Simple"], 0.9)  # 2.29.7 appends .9 to the Simple row
    if 0 <= log_size < len(table):
        bw *= table[log_size]
    us = latency_us + nbytes / (1000.0 * bw)
    return Candidate(e.algorithm, e.protocol, latency_us, bw, us * 1e-6)


def _reason(box: GpuBox, ppn: int, a: str, p: str, algos: tuple[str, ...],
            protos: tuple[str, ...]) -> str:
    if a == "nvls_tree" and not (box.nvls_available(ppn) and "nvls" in box_graphs(box, ppn)):
        return "NVLS-Tree needs NVLink SHARP (NVSwitch, compute capability >= 9.0) in each node"
    if p == "LL128" and box.fabric != "nvswitch":
        return "LL128 needs NVLink paths"
    if a not in algos:
        return "excluded by NCCL_ALGO"
    if p not in protos:
        return "excluded by NCCL_PROTO"
    return ""


def _busbw(box: GpuBox, g: MultinodeGraph, a: str, p: str, nodes: int, ppn: int,
           col: int, version: NcclConstants | None = None) -> float:
    gen = box.generation
    ring_ll128 = RING_LL128_PER_CHANNEL[gen][col]
    nvls_tree_cap = NVLS_TREE_PER_CHANNEL.get(gen, (0.0, 0.0))[col]
    if gen == "blackwell":
        ring_ll128 = _blackwell_row(version, "blackwell_ring_ll128_gbps",
                                    (0.0, *RING_LL128_PER_CHANNEL[gen]))[1 + col]
        nvls_tree_cap = _blackwell_row(version, "blackwell_nvls_tree_gbps",
                                       NVLS_TREE_PER_CHANNEL[gen])[col]
    ch, bw = g.n_channels, g.speed_gbps
    if a == "nvls_tree":  # the node's NVLS graph inside, the network speed between nodes
        nvls = box_graphs(box, ppn)["nvls"]
        k = nvls.n_channels
        intra = nvls.bw_intra_gbps * NVLS_EFFICIENCY[gen] * (k - 1) / k * 2
        net_per_head = min(bw, g.n_channels * bw / k)  # the heads share the node's network
        inter = net_per_head * (2 if nodes <= 2 else 1)
        return k * min(intra, inter, nvls_tree_cap)
    bus = ch * bw
    if a == "ring":
        if p == "LL":
            return min(LL_MAX_BY_VENDOR[box.cpu_vendor][col], bus * 0.5)
        if p == "LL128":
            return min(bus * LL128_DATA_FRACTION, ch * ring_ll128)
        return bus
    if nodes <= 2 and g.tree_intra_gbps:  # NCCL reads the tree graph's intra speed there
        bus = ch * g.tree_intra_gbps
    bus = min(bus * TREE_EFFICIENCY, ch * TREE_PER_CHANNEL[gen][col])
    if p == "LL":
        return min(bus * TREE_LL_FRACTION, LL_MAX_BY_VENDOR[box.cpu_vendor][col])
    if p == "LL128":
        return min(bus * 120 / 128, ch * TREE_LL128_PER_CHANNEL[gen][col])
    return bus


def _wire_ratio(box: GpuBox, graph: MultinodeGraph, wire: MultinodeGraph, a: str, p: str,
                nodes: int, ppn: int, version: NcclConstants | None) -> float:
    """How much faster pair ``(a, p)`` runs on the ``wire`` graph than on NCCL's ``graph``:
    the ratio of their bus bandwidths (every size-dependent factor cancels). Taken for a ring
    only: a ring across nodes is bound by the NICs, which the wire graph fills (2 x 8 H100 over
    8 x 400 Gb/s, ``NCCL_ALGO=Ring``: 393 GB/s busbw, NCCL's graph 360, the wire graph 384);
    trees and NVLS-Tree keep NCCL's per-channel caps."""
    col = 0 if nodes <= 2 else 1
    planned = _busbw(box, graph, a, p, nodes, ppn, col, version)
    return _busbw(box, wire, a, p, nodes, ppn, col, version) / planned if planned else 1.0


def tree_network_floor_us(nbytes: int, net: Network, box: GpuBox | None = None,
                          gpus_per_node: int | None = None) -> float:
    """The least time a tree across two nodes moves ``nbytes`` through a node's NICs, us: each
    node's partial sum goes out whole and the result comes back whole, each direction at the
    rate of the node's ports its ``gpus_per_node`` GPUs reach (``rails x nic_gbps`` for the
    whole box: :func:`usable_devices`). NCCL prices a two-node tree at its graph's intra-node
    speed (up to twice the network's), so without this floor the model let two nodes of
    8 x 400 Gb/s reach a bus bandwidth their NICs cannot carry."""
    rails = net.rails if box is None else usable_devices(net.rails, box, gpus_per_node)
    return nbytes / (rails * net.nic_gbps * 1e3)


def nvls_tree_latency_us(nodes: int, version: NcclConstants | None = None) -> float:
    """NVLS-Tree's latency across ``nodes`` nodes, us (``src/graph/tuning.cc``
    ``ncclTopoTuneModel``: ``intraLat + 2 * log2i(nNodes) * interLat``, both per release:
    ``hwLat[NVLINK][NVLS_TREE]`` (``baseLat`` in 2.18.5) and ``hwLat[NET][NVLS_TREE]``, 19 us in
    2.18.5, 14 in 2.20.5-2.27.5, 20.9 from 2.28.9; see
    :mod:`~distlab.nccl.versions`). ``version`` ``None``: 2.28.9."""
    intra = NVLS_TREE_INTRA_US if version is None else version.nvls_latency_us
    hop = NET_HOP_US[("nvls_tree", "Simple")] if version is None else version.nvls_tree_net_hop_us
    return intra + 2 * int(math.log2(nodes)) * hop


def tree_fill_sync_us(sync_us: float, latency_us: float, base_us: float) -> float:
    """A tree's step waits across nodes once its hop latency is counted, us.

    NCCL's tree latency (``src/graph/tuning.cc`` ``ncclTopoTuneModel``: ``baseLat + 2 *
    ((ppn - 1) * intraLat + log2i(nNodes) * interLat)``) is the first chunk's way up and down
    the tree: one hop latency per pipeline step of the tree's depth (``2 * (ppn - 1 +
    log2(nodes))`` steps, :meth:`MultinodeLayout.steps`). The sync term
    (:func:`~distlab.nccl.per_size.exposed_steps`) is the flag waits of the
    first ``NCCL_STEPS`` steps, the same fill: on a tree at least 16 deep (8 GPUs per node) all
    of them are depth steps. The fill is paid once: the step waits beyond the hop latency
    ``latency_us - base_us``, never below 0. (NVLS-Tree keeps both: its step waits are the
    NVLink SHARP reductions inside the node, its hops the network's.)"""
    return max(0.0, sync_us - (latency_us - base_us))


def net_hop_us(table_us: float, protocol: str, floor_us: float) -> float:
    """One network hop of a run, us: NCCL's table's (``table_us``), or the transport's own
    latency ``floor_us`` (plus :data:`SIMPLE_COMPLETION_US` for Simple) where that is longer;
    ``floor_us`` 0: the table's."""
    if not floor_us:
        return table_us
    return max(table_us, floor_us + (SIMPLE_COMPLETION_US if protocol == "Simple" else 0.0))


def nvls_tree_fill_us(transfer_us: float, chunk_bytes: int, channels: int, algbw_gbps: float,
                      depth: int) -> float:
    """NVLS-Tree's pipeline fill across nodes, us: the ``depth - 1`` chunk steps before the
    last GPU of the tree receives its first chunk, each moving one chunk on every channel at
    the algorithm bandwidth (``(depth - 1) * chunk * channels / algbw``), and never more than
    the transfer itself (a message of fewer chunks than the tree is deep moves at half speed:
    each chunk waits for the one before it on the way up and back). It stands in place of the
    NVLS step waits on one node (the NVLink SHARP reductions overlap the network's steps), and
    adds no constant: 2 x 8 H100 over 8 x 400 Gb/s with NCCL 2.26.2 (nccl-tests#309) runs 1
    MiB to 1 GiB within 8% with it."""
    fill = (depth - 1) * chunk_bytes * channels / (1e3 * algbw_gbps)
    return min(transfer_us, fill)


def _latency(box: GpuBox, a: str, p: str, n: int, ppn: int, nodes: int,
             version: NcclConstants | None = None, plugin_us: float = 0.0,
             hop_floor_us: float = 0.0) -> float:
    """NCCL's estimate's fixed term of pair ``(a, p)``, us; ``plugin_us``: the net plugin's
    latency, added to each network hop, twice for Simple (the flush); ``hop_floor_us``: a
    network hop is at least this (:func:`net_hop_us`; NCCL's estimate has none)."""
    hop_class = "nvlink" if box.fabric == "nvswitch" else "pci"
    plugin = plugin_us * (2 if p == "Simple" else 1)
    if a == "nvls_tree":
        hop = NET_HOP_US[(a, p)] if version is None else version.nvls_tree_net_hop_us
        intra = nvls_tree_latency_us(nodes, version) - 2 * int(math.log2(nodes)) * hop
        return intra + 2 * int(math.log2(nodes)) * (net_hop_us(hop, p, hop_floor_us) + plugin)
    net_hop = net_hop_us(NET_HOP_US[("tree" if ppn == 1 else a, p)], p, hop_floor_us) + plugin
    intra = HOP_LATENCY_US[hop_class][(a, p)]
    if a == "ring":
        overhead = NET_OVERHEAD_US[box.cpu_vendor] * (3 if p == "Simple" else 1)
        intra = max(intra, overhead)
        steps, inter_steps = 2 * (n - 1), 2 * (nodes - 1)
        return BASE_LATENCY_US[(a, p)] + (steps - inter_steps) * intra + inter_steps * net_hop
    return BASE_LATENCY_US[(a, p)] + 2 * ((ppn - 1) * intra + int(math.log2(nodes)) * net_hop)


def nvls_tree_chunk(nbytes: int, channels: int, heads: int, nodes: int, *,
                    env_chunk: int = 0) -> int:
    """NVLS-Tree's chunk (``src/enqueue.cc`` ``calcCollChunking``, lines 2056-2069 at
    ``v2.28.9-1``): ``nvlsChunkSize``, at most ``NCCL_NVLSTREE_MAX_CHUNKSIZE`` (unset: 64 KiB
    from 4 nodes on, else no cap), then 256, 128, 64 and 32 KiB while ``nbytes`` is under 32,
    16, 4 and 1 chunks per concurrent operation (``channels * heads``). ``env_chunk``: both
    variables set to it (AWS's plugin: 512 KiB); 0: NCCL's defaults (128 KiB, unset)."""
    start = env_chunk or NVLS_CHUNK_BYTES
    cap = env_chunk or (65536 if nodes >= 4 else start)
    chunk = min(start, cap)
    ops = channels * heads
    for factor, floor in ((32, 262144), (16, 131072), (4, 65536), (1, 32768)):
        if nbytes < factor * ops * chunk and chunk > floor:
            chunk = floor
    return chunk


def ring_exposed_latency_us(box: GpuBox, protocol: str, n: int, nodes: int, steps: int,
                            transfer_us: float, nbytes: int, runtime_channels: int, *,
                            hop_floor_us: float = 0.0, extra_hop_us: float = 0.0) -> float:
    """A ring's latency across nodes as it runs: the base once, and per step the part of its
    hop the step's copy does not hide; ``2(nodes-1)`` of every ``2(n-1)`` steps hop over the
    network (``NET`` row), the others over NVLink or PCIe, floored by ``getNetOverhead``
    (times 3 for Simple). NCCL's plateau factor for a Simple ring applies as in its estimate.
    ``hop_floor_us``: the transport's own hop latency (:func:`net_hop_us`); ``extra_hop_us``:
    added to each network hop (the plugin's stripe threshold: :meth:`Network.stripe_delay_us`)."""
    hop_class = "nvlink" if box.fabric == "nvswitch" else "pci"
    intra = max(HOP_LATENCY_US[hop_class][("ring", protocol)],
                NET_OVERHEAD_US[box.cpu_vendor] * (3 if protocol == "Simple" else 1))
    net_hop = net_hop_us(NET_HOP_US[("tree" if n == nodes else "ring", protocol)], protocol,
                         hop_floor_us) + extra_hop_us
    per_step = transfer_us / steps
    inter_share = (nodes - 1) / (n - 1)
    exposed = steps * (inter_share * max(0.0, net_hop - per_step)
                       + (1 - inter_share) * max(0.0, intra - per_step))
    lat = BASE_LATENCY_US[("ring", protocol)] + exposed
    if protocol == "Simple" and box.sm >= 80 and nbytes // (runtime_channels * n) >= 64:
        lat *= RING_SIMPLE_PLATEAU
    return lat


# --- the execution across nodes ---------------------------------------------------------------

def multinode_execution(box: GpuBox, world_size: int, sizes_bytes: Sequence[int], nodes: int,
                        net: Network | str | None, harness: str,
                        constants: ExecutionConstants | None,
                        algorithms: Iterable[str] | None, protocols: Iterable[str] | None,
                        version: NcclConstants | None = None) -> list[Execution]:
    """:func:`~distlab.nccl.execution.nccl_execution` across nodes (its
    arguments, ``box`` resolved): the same pipeline
    (:func:`~distlab.nccl.per_size.run_size`) on NCCL's multi-node choice,
    laid out by :class:`MultinodeLayout`; the host term counts the GPUs of one node (one process
    per node under nccl-tests). A net plugin's reported latency steers NCCL's choice only: the
    run's hops are priced on NCCL's hardware table, or the transport's measured hop where that
    is longer (:func:`net_hop_us`), since the plugin's figure is a tuning input."""
    if net is None:
        raise ValueError(f"nodes={nodes} needs a network: one of {', '.join(NETWORKS)}")
    nw = network(net)
    nodes = check_int("nodes", nodes, minimum=2)
    n = check_int("world_size", world_size, minimum=nodes, maximum=nodes * box.gpus)
    how = HARNESSES[check_choice("harness", harness, HARNESSES)]
    constants = shipped_constants() if constants is None else constants
    n = _per_node(n, nodes)
    protocols = nw.protocols(protocols)
    algos, protos = _restrictions(algorithms, protocols)
    choices = node_choices(box, n, sizes_bytes, nodes, nw, algos, protos, version,
                           asked=(algorithms, protocols))
    graph = multinode_graphs(box, nodes, nw, version=version, gpus_per_node=n // nodes)
    layout = MultinodeLayout(box, n, nodes, graph, nw.hop_floor_us, nw)
    wire = multinode_graphs(box, nodes, nw, version=version, physical=True,
                            gpus_per_node=n // nodes)
    host = how.term(constants, n // nodes, box)
    out = []
    for ch in choices:
        pick = pick_of(ch)
        if pick.algorithm == "ring" and wire != graph:  # at the graph its links allow
            pick = replace(pick, algbw_gbps=pick.algbw_gbps * _wire_ratio(
                box, graph, wire, pick.algorithm, pick.protocol, nodes, n // nodes, version))
        if (nw.plugin_latency_us or nw.hop_floor_us) and pick.algorithm != "ring":
            pick = replace(pick, latency_us=_latency(box, pick.algorithm, pick.protocol, n,
                                                     n // nodes, nodes, version,
                                                     hop_floor_us=nw.hop_floor_us))
        e = run_size(pick, layout, n, host, constants)
        if nodes == 2 and e.algorithm in ("tree", "nvls_tree"):
            e = replace(e, transfer_us=max(e.transfer_us, tree_network_floor_us(
                e.nbytes, nw, box, n // nodes)))
        if e.algorithm == "nvls_tree":
            e = replace(e, sync_us=nvls_tree_fill_us(e.transfer_us, e.chunk_bytes, e.channels,
                                                     pick.algbw_gbps, layout.depth()))
        if e.algorithm == "tree":
            e = replace(e, sync_us=tree_fill_sync_us(e.sync_us, e.latency_us,
                                                     BASE_LATENCY_US[("tree", e.protocol)]))
        if e.algorithm != "ring":  # the fill's messages on fewer ports: more time on the wire
            e = replace(e, transfer_us=e.transfer_us + layout.tree_stripe_delay_us(e))
        out.append(e)
    return out


@dataclass(frozen=True)
class MultinodeLayout:
    """An allreduce of ``n`` GPUs over ``nodes`` nodes of ``box`` laid out on NCCL's channels
    (:class:`~distlab.nccl.per_size.ChannelLayout`). A ring's steps cross the network
    ``2(nodes-1)`` times per loop (each hop hidden under the step's copy as on one node, the
    network hop instead of NVLink's, :func:`ring_exposed_latency_us`); tree and NVLS-Tree keep
    the estimate's latency and run a pipeline as deep as the tree (a chain in the node, log2
    nodes across)."""

    box: GpuBox
    n: int
    nodes: int
    graph: MultinodeGraph
    hop_floor_us: float = 0.0
    network: Network | None = None

    def channels(self, pick: Pick) -> Channels:
        """NVLS's channels across nodes for NVLS-Tree, else the graph's at run time."""
        nvls = pick.algorithm == "nvls_tree"
        total = nvls_channels(self.box, multinode=True) if nvls else self.graph.runtime_channels
        nc, nt = launched_channels("nvls" if nvls else pick.algorithm, pick.protocol,
                                   pick.nbytes, total, world_size=self.n)
        return Channels(nc, total, nt)

    def chunk_bytes(self, pick: Pick, launched: int) -> int:
        """NVLS-Tree's chunk (:func:`nvls_tree_chunk`), else NCCL's across ``nodes``."""
        if pick.algorithm == "nvls_tree":
            env = self.network.nvls_chunk_bytes if self.network is not None else 0
            return nvls_tree_chunk(pick.nbytes, launched, self.n // self.nodes, self.nodes,
                                   env_chunk=env)
        return chunk_bytes(pick.algorithm, pick.protocol, pick.nbytes, launched, self.n,
                           nodes=self.nodes)

    def depth(self) -> int:
        """The tree's depth in steps, up and back: a chain through the node's GPUs and
        ``log2(nodes)`` network hops, each way."""
        ppn = self.n // self.nodes
        return 2 * (ppn - 1 + max(1, math.ceil(math.log2(self.nodes))))

    def steps(self, pick: Pick, launched: int, chunk: int) -> int:
        """A ring's steps as on one node; else the tree's depth plus one step per chunk of
        each concurrent operation (NVLS-Tree: one per GPU of the node and channel)."""
        if pick.algorithm == "ring":
            return allreduce_steps("ring", pick.protocol, pick.nbytes, launched, self.n, chunk)
        ppn = self.n // self.nodes
        depth = self.depth()
        ops = launched * (ppn if pick.algorithm == "nvls_tree" else 1)
        return depth + math.ceil(pick.nbytes / (ops * chunk)) - 1

    def ring_latency_us(self, pick: Pick, steps: int, transfer_us: float) -> float:
        """:func:`ring_exposed_latency_us`; each network hop also pays the plugin's stripe
        threshold on the step's message (a channel's ``2(n-1)/n`` share of the data over its
        steps, on the wire: :meth:`Network.stripe_delay_us`)."""
        extra = 0.0
        if self.network is not None:
            launched = self.channels(pick).launched
            data = pick.nbytes * 2 * (self.n - 1) / (self.n * launched * steps)
            extra = self.network.stripe_delay_us(wire_bytes(data, pick.protocol))
        return ring_exposed_latency_us(self.box, pick.protocol, self.n, self.nodes, steps,
                                       transfer_us, pick.nbytes, self.graph.runtime_channels,
                                       hop_floor_us=self.hop_floor_us, extra_hop_us=extra)

    def tree_stripe_delay_us(self, e: Execution) -> float:
        """What a tree's or NVLS-Tree's ``2 log2(nodes)`` network hops lose to the plugin's
        stripe threshold, us: each hop's message is one step of one channel (NVLS-Tree: of one
        head), ``min(chunk, its share of the data)``, on the wire (0 without a network or a
        threshold). Wire time, so :func:`multinode_execution` books it as transfer: the hop's
        latency stays the transport's 8-byte figure."""
        if self.network is None or e.algorithm == "ring":
            return 0.0
        ops = e.channels * (self.n // self.nodes if e.algorithm == "nvls_tree" else 1)
        data = min(e.chunk_bytes, math.ceil(e.nbytes / ops))
        hops = 2 * int(math.log2(self.nodes))
        return hops * self.network.stripe_delay_us(wire_bytes(data, e.protocol))
