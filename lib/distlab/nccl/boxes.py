"""GPU boxes we cannot reach, and the graphs NCCL's topology search finds on them.

A :class:`GpuBox` is one node of ``gpus`` GPUs joined by one kind of switch: NVSwitch (every GPU's
NVLinks go to the switches) or PCIe switches under one CPU. :func:`nccl_graphs` returns, per
NCCL algorithm, the *graph* NCCL's ``ncclTopoCompute`` settles on for ``world_size`` GPUs of the
box: how many channels and how many GB/s each channel may use. NCCL's tuning model
(:mod:`distlab.nccl.tuning`) turns those graphs into latencies and bandwidths.

Every constant is NCCL's own, from NVIDIA/nccl tag ``v2.28.9-1`` (the NCCL of torch 2.11, which the
project's own H100 profile records), file named beside it; spec figures (``link_gbps``) name their
datasheet. NCCL's link figures are lower than the specs on purpose: they are what NCCL's copies
achieve (``SM90_NVLINK_BW`` 20.6 GB/s per NVLink 4 link against the 25 GB/s line rate).

The search itself (``src/graph/search.cc``) explores GPU orders over a topology graph; on a box
where every GPU has the same link to one switch fabric every order is equivalent, so what it
arrives at reduces to the arithmetic in :func:`_search`: the first speed of NCCL's speed table
that fits, as many channels as the GPU's link holds at that speed, the channel duplication of
``ncclTopoDupChannels`` and the second pass that tries higher speeds. Assumption (stated, not
NCCL's): the fabric is symmetric, i.e. switch uplinks are at least as fast as a GPU's own link.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeAlias

from distlab._checks import check_choice, check_int

if TYPE_CHECKING:
    from distlab.nccl.versions import NcclConstants

__all__ = ["GPU_BOXES", "NCCL_TAG", "BoxLike", "GpuBox", "NcclGraph", "box_graphs", "gpu_box",
           "nccl_graphs"]

NCCL_TAG = "v2.28.9-1"
"""The NVIDIA/nccl git tag every NCCL constant in this module and
:mod:`distlab.nccl.tuning` is from."""

#: GB/s NCCL credits one NVLink link with, by compute capability (``src/graph/topo.h``:
#: ``SM80_NVLINK_BW``, ``SM90_NVLINK_BW``, ``SM100_NVLINK_BW``).
NVLINK_GBPS_PER_LINK = {80: 20.0, 90: 20.6, 100: 40.1}



def nvlink_gbps_per_link(sm: int) -> float:
    """``ncclTopoGetNvbw`` (``src/graph/topo.h``): the per-link figure of the newest class at or
    below ``sm`` (an Ada GPU, 89, reads Ampere's ``SM80_NVLINK_BW``)."""
    return NVLINK_GBPS_PER_LINK[max(k for k in NVLINK_GBPS_PER_LINK if k <= sm)]


#: PCIe lane rate in 100 Mb/s units by generation (``src/graph/topo.cc`` ``kvDictPciGen``: 8, 16,
#: 32 GT/s -> 60, 120, 240); NCCL's link GB/s is ``lanes * rate / 80`` (``ncclTopoAddPci``).
PCIE_RATE_PER_LANE = {3: 60, 4: 120, 5: 240}

#: NCCL's per-channel speed tables, GB/s, tried from the first (``src/graph/search.cc``
#: ``speedArrayIntra``, ``sm90SpeedArrayIntra``, ``sm100SpeedArrayIntra``).
SPEEDS_INTRA = {
    "ampere": (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
    "hopper": (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
    "blackwell": (90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0),
}

MAX_RING_CHANNELS = 32
"""``MAXCHANNELS / 2`` (``src/include/device.h`` MAXCHANNELS 64; ``src/init.cc`` sets the ring
graph's ``maxChannels``); the tree graph must have exactly the ring's channel count."""

MAX_NVLS_ARITY = 32
"""``NCCL_MAX_NVLS_ARITY`` (``src/include/device.h``): NVLS uses one channel per GPU, at most 32."""

INTEL_P2P_OVERHEAD = 6 / 5
"""``INTEL_P2P_OVERHEAD(bw)`` (``src/graph/topo.h``): GPU-to-GPU traffic through an Intel root
complex travels as 64-byte TLPs and costs 6/5 of its bytes on the PCIe links."""


@dataclass(frozen=True)
class GpuBox:
    """One node of ``gpus`` identical GPUs on one switch fabric.

    Attributes:
        key: short name (the key of :data:`GPU_BOXES`).
        name: what it is, e.g. ``"8x H100 SXM (NVLink 4 + NVSwitch)"``.
        gpu: the GPU model.
        gpus: GPUs in the box (the largest world size it can model; one node only).
        sm: compute capability times 10 (80 Ampere, 90 Hopper, 120 RTX Blackwell).
        fabric: ``"nvswitch"`` (all NVLinks to NVSwitch chips) or ``"pcie"`` (PCIe switches
            under one CPU, peer-to-peer enabled).
        link: the GPU's link in words.
        link_gbps: the GPU's link bandwidth per direction from its specification, GB/s.
        link_source: where ``link_gbps`` comes from.
        nvlinks: NVLink links per GPU (``fabric="nvswitch"``).
        pcie_gen, pcie_lanes: the GPU's PCIe link (``fabric="pcie"``).
        cpu_vendor: ``"amd"``, ``"intel"`` or ``"arm"`` (Grace); matters on PCIe
            (:data:`INTEL_P2P_OVERHEAD`) and across nodes (NCCL's per-vendor rows).
        gpus_per_host: GPUs one host (one OS, one ``-g`` process) holds; 0: all of ``gpus``.
            A GB200 NVL72 is one NVLink domain of 72 GPUs in 18 trays of 4.
        cpu_link_gbps: on a PCIe box across two CPU sockets, NCCL's figure for the link between
            the sockets, GB/s (``src/graph/topo.h``: ``AMD_BW`` 16, ``SRP_QPI_BW`` 22 for
            Sapphire Rapids, ``ERP_QPI_BW`` 40 for Emerald Rapids); every ring and tree channel
            crosses it once each way, so it bounds ``channels * speed`` and the paths are
            ``SYS``. 0: one socket.
        nvlink_domain: GPUs joined by NVLink beyond one host (multi-node NVLink, MNNVL), which
            NCCL treats as one node (``comm->MNNVL``: the clique is the node); 0: no such domain.
    """

    key: str
    name: str
    gpu: str
    gpus: int
    sm: int
    fabric: str
    link: str
    link_gbps: float
    link_source: str
    nvlinks: int = 0
    pcie_gen: int = 0
    pcie_lanes: int = 0
    cpu_vendor: str = "amd"
    gpus_per_host: int = 0
    cpu_link_gbps: float = 0.0
    nvlink_domain: int = 0

    def __post_init__(self) -> None:
        check_int("gpus", self.gpus, minimum=1)
        check_choice("sm", self.sm, (80, 89, 90, 100, 120))
        check_choice("fabric", self.fabric, ("nvswitch", "pcie"))
        check_choice("cpu_vendor", self.cpu_vendor, ("amd", "intel", "arm"))
        check_int("gpus_per_host", self.gpus_per_host, minimum=0, maximum=self.gpus)
        if self.gpus_per_host == 0:
            object.__setattr__(self, "gpus_per_host", self.gpus)
        if not self.cpu_link_gbps >= 0:
            raise ValueError(f"cpu_link_gbps must be >= 0 (0: one socket), got "
                             f"{self.cpu_link_gbps!r}")
        if self.fabric == "nvswitch":
            check_int("nvlinks", self.nvlinks, minimum=1)
        else:
            check_choice("pcie_gen", self.pcie_gen, tuple(PCIE_RATE_PER_LANE))
            check_int("pcie_lanes", self.pcie_lanes, minimum=1, maximum=16)
        if not self.link_gbps >= self.nccl_link_gbps:
            raise ValueError(f"link_gbps must be the spec bandwidth per direction, at least "
                             f"NCCL's own figure {self.nccl_link_gbps:g} GB/s for this link, "
                             f"got {self.link_gbps!r}")
        lowest = SPEEDS_INTRA[self.generation][-1] * self.p2p_overhead
        if self.nccl_link_gbps < lowest:  # search.cc would fall back to one 0.1 GB/s channel
            raise ValueError(f"link of {self.nccl_link_gbps:g} GB/s (NCCL's figure) is below the "
                             f"lowest speed NCCL tries for {self.generation} GPUs, {lowest:g} "
                             "GB/s; NCCL then falls back to a 0.1 GB/s graph this model does "
                             "not cover")

    @property
    def generation(self) -> str:
        """NCCL's GPU class for its tables: ``"ampere"``, ``"hopper"`` or ``"blackwell"``
        (``src/graph/tuning.cc``: compute capability >= 100, >= 90, >= 80)."""
        return "blackwell" if self.sm >= 100 else "hopper" if self.sm >= 90 else "ampere"

    @property
    def nccl_link_gbps(self) -> float:
        """GB/s per direction NCCL credits a channel's path with (see module doc): the GPU's
        link, and on a two-socket PCIe box at most the link between the sockets."""
        if self.fabric == "nvswitch":
            return self.nvlinks * nvlink_gbps_per_link(self.sm)
        pcie = self.pcie_lanes * PCIE_RATE_PER_LANE[self.pcie_gen] / 80.0
        return min(pcie, self.cpu_link_gbps) if self.cpu_link_gbps else pcie

    @property
    def path(self) -> str:
        """NCCL's path type between the box's GPUs: ``"NVL"``, ``"PCI"`` (PCIe switches under
        one CPU) or ``"SYS"`` (across CPU sockets)."""
        if self.fabric == "nvswitch":
            return "NVL"
        return "SYS" if self.cpu_link_gbps else "PCI"

    @property
    def p2p_overhead(self) -> float:
        """Bytes a GPU-to-GPU byte costs on the links: :data:`INTEL_P2P_OVERHEAD` for PCIe
        through an Intel root complex, else 1."""
        return INTEL_P2P_OVERHEAD if self.fabric == "pcie" and self.cpu_vendor == "intel" else 1.0

    def nvls_available(self, world_size: int) -> bool:
        """NVLink SHARP (NVLS): NVSwitch, compute capability >= 90 (``src/graph/search.cc``
        skips the NVLS graph otherwise) and at least two GPUs (``src/transport/nvls.cc``
        ``ncclNvlsInit`` returns without NVLS for ``gpuCount < 2``)."""
        return self.fabric == "nvswitch" and self.sm >= 90 and world_size >= 2


GPU_BOXES: dict[str, GpuBox] = {
    "h100_sxm8": GpuBox(
        "h100_sxm8", "8x H100 SXM (NVLink 4 + NVSwitch)", "H100 SXM5 80GB", gpus=8, sm=90,
        fabric="nvswitch", link="NVLink 4, 18 links per GPU to 4 NVSwitch chips", nvlinks=18,
        link_gbps=450.0, cpu_vendor="intel",
        link_source="NVIDIA H100 Tensor Core GPU datasheet: NVLink 900 GB/s (both directions) "
                    "= 18 links x 25 GB/s per direction"),
    "a100_sxm8": GpuBox(
        "a100_sxm8", "8x A100 SXM (NVLink 3 + NVSwitch)", "A100 SXM4 40/80GB", gpus=8, sm=80,
        fabric="nvswitch", link="NVLink 3, 12 links per GPU to 6 NVSwitch chips", nvlinks=12,
        link_gbps=300.0, cpu_vendor="amd",
        link_source="NVIDIA A100 Tensor Core GPU datasheet: NVLink 600 GB/s (both directions) "
                    "= 12 links x 25 GB/s per direction"),
    "pcie5_8": GpuBox(
        "pcie5_8", "8x RTX PRO 6000 Blackwell (PCIe Gen5 switches, no NVLink)",
        "RTX PRO 6000 Blackwell 96GB", gpus=8, sm=120, fabric="pcie",
        link="PCIe Gen5 x16 per GPU, PCIe switches under one AMD CPU, P2P enabled",
        pcie_gen=5, pcie_lanes=16, link_gbps=63.0, cpu_vendor="amd",
        link_source="PCI Express Base Specification 5.0: 32 GT/s x 16 lanes x 128/130 "
                    "encoding / 8 bits = 63.0 GB/s per direction"),
    "h200_sxm8": GpuBox(
        "h200_sxm8", "8x H200 SXM (NVLink 4 + NVSwitch)", "H200 SXM 141GB", gpus=8, sm=90,
        fabric="nvswitch", link="NVLink 4, 18 links per GPU to 4 NVSwitch chips", nvlinks=18,
        link_gbps=450.0, cpu_vendor="intel",
        link_source="NVIDIA H200 Tensor Core GPU datasheet: NVLink 900 GB/s (both directions) "
                    "= 18 NVLink 4 links x 25 GB/s per direction; DGX H200: 2x Xeon Platinum "
                    "8480C (Intel). NCCL: SM90_NVLINK_BW 20.6 GB/s per link (topo.h)"),
    "b200_sxm8": GpuBox(
        "b200_sxm8", "8x B200 SXM (NVLink 5 + NVSwitch)", "B200 SXM 180GB", gpus=8, sm=100,
        fabric="nvswitch", link="NVLink 5, 18 links per GPU to 2 NVLink 5 switch chips",
        nvlinks=18, link_gbps=900.0, cpu_vendor="intel",
        link_source="NVIDIA DGX B200 datasheet: NVLink 5, 1.8 TB/s per GPU (both directions) "
                    "= 18 links x 50 GB/s per direction, 2x Xeon Platinum 8570 (Intel). NCCL: "
                    "SM100_NVLINK_BW 40.1 GB/s per link (topo.h)"),
    "gb200_nvl72": GpuBox(
        "gb200_nvl72", "GB200 NVL72 (72 B200 GPUs in one NVLink 5 domain, 18 trays of 4)",
        "B200 (GB200 superchip)", gpus=72, sm=100, fabric="nvswitch",
        link="NVLink 5, 18 links per GPU to the rack's NVLink switch trays", nvlinks=18,
        link_gbps=900.0, cpu_vendor="arm", gpus_per_host=4, nvlink_domain=72,
        link_source="NVIDIA GB200 NVL72 specification: 72 Blackwell GPUs, NVLink 5 130 TB/s "
                    "in all = 72 x 1.8 TB/s (900 GB/s per direction per GPU); 36 Grace CPUs "
                    "(Arm), 4 GPUs per compute tray. NCCL treats an NVLink clique across hosts "
                    "as one node (MNNVL, src/init.cc) with 24 NVLS channels (nvls.cc "
                    "NVLS_NCHANNELS_SM100_NVL)"),
    "l40s_pcie8": GpuBox(
        "l40s_pcie8", "8x L40S (PCIe Gen4 switches, two Intel sockets, no NVLink)", "L40S 48GB",
        gpus=8, sm=89, fabric="pcie",
        link="PCIe Gen4 x16 per GPU, 4 GPUs per socket behind PCIe switches, SYS between sockets",
        pcie_gen=4, pcie_lanes=16, link_gbps=31.5, cpu_vendor="intel", cpu_link_gbps=22.0,
        link_source="NVIDIA L40S datasheet: PCIe Gen4 x16, 64 GB/s bidirectional (31.5 GB/s "
                    "per direction), no NVLink; two Sapphire Rapids sockets: NCCL SRP_QPI_BW "
                    "22 GB/s between them (topo.h), PCIe Gen4 x16 = 16 x 120 / 80 = 24 GB/s "
                    "(topo.cc)"),
    "a100_pcie8": GpuBox(
        "a100_pcie8", "8x A100 PCIe (PCIe Gen4 switches, two AMD sockets, no NVLink)",
        "A100 PCIe 80GB", gpus=8, sm=80, fabric="pcie",
        link="PCIe Gen4 x16 per GPU, 4 GPUs per socket behind PCIe switches, SYS between sockets",
        pcie_gen=4, pcie_lanes=16, link_gbps=31.5, cpu_vendor="amd", cpu_link_gbps=16.0,
        link_source="NVIDIA A100 PCIe datasheet: PCIe Gen4 64 GB/s (31.5 GB/s per direction; "
                    "no NVLink bridges fitted); two EPYC sockets: NCCL AMD_BW 16 GB/s between "
                    "them (topo.h)"),
    "pcie4_8": GpuBox(
        "pcie4_8", "8x L40S (PCIe Gen4 switches under one AMD CPU, P2P enabled)", "L40S 48GB",
        gpus=8, sm=89, fabric="pcie",
        link="PCIe Gen4 x16 per GPU, PCIe switches under one AMD CPU, P2P enabled",
        pcie_gen=4, pcie_lanes=16, link_gbps=31.5, cpu_vendor="amd",
        link_source="PCI Express Base Specification 4.0: 16 GT/s x 16 lanes x 128/130 / 8 = "
                    "31.5 GB/s per direction; NCCL: 16 x 120 / 80 = 24 GB/s (topo.cc)"),
}
GPU_BOXES["a800_sxm8"] = replace(
    GPU_BOXES["a100_sxm8"], key="a800_sxm8", gpu="A800 SXM4 80GB",
    name="8x A800 SXM (NVLink 3 + NVSwitch, 8 links per GPU)", nvlinks=8, link_gbps=200.0,
    link="NVLink 3, 8 links per GPU to 6 NVSwitch chips",
    link_source="NVIDIA A800: the A100 with NVLink cut to 400 GB/s (both directions) = 8 NVLink "
                "3 links x 25 GB/s per direction (NVIDIA's statement, Reuters, 2022-11-07: "
                "https://tweakers.net/nieuws/203182/); HGX board and NVSwitch as A100's. NCCL: "
                "SM80_NVLINK_BW 20 GB/s per link (topo.h)")
GPU_BOXES["h800_sxm8"] = replace(
    GPU_BOXES["h100_sxm8"], key="h800_sxm8", gpu="H800 SXM5 80GB",
    name="8x H800 SXM (NVLink 4 + NVSwitch, 8 links per GPU)", nvlinks=8, link_gbps=200.0,
    link="NVLink 4, 8 links per GPU to 4 NVSwitch chips",
    link_source="NVIDIA H800: the H100 SXM with NVLink cut to 400 GB/s (both directions) = 8 "
                "NVLink 4 links x 25 GB/s per direction; DeepSeek-V3's H800 nodes "
                "(https://arxiv.org/abs/2412.19437, section 3.2.2) reach about 160 GB/s over "
                "NVLink. NCCL: SM90_NVLINK_BW 20.6 GB/s per link (topo.h), 164.8 for 8")
GPU_BOXES["gb200_nvl36"] = replace(
    GPU_BOXES["gb200_nvl72"], key="gb200_nvl36", gpus=36, nvlink_domain=36,
    name="GB200 NVL36 (36 B200 GPUs in one NVLink 5 domain, 9 trays of 4)",
    link_source="NVIDIA GB200 NVL72 specification (NVL36: the half-rack configuration, 36 GPUs, "
                "same NVLink 5 per GPU: 900 GB/s per direction); MNNVL as gb200_nvl72")


BoxLike: TypeAlias = GpuBox | str
"""What the public functions of the NCCL model take for a box: a :class:`GpuBox` or the name of
one of :data:`GPU_BOXES`. They resolve it once (:func:`gpu_box`); everything inside takes a
:class:`GpuBox`."""


def gpu_box(box: BoxLike) -> GpuBox:
    """``box`` itself if it is a :class:`GpuBox`, else the preset of :data:`GPU_BOXES` it names
    (``TypeError`` for anything else, ``ValueError`` naming every preset for an unknown name)."""
    if isinstance(box, GpuBox):
        return box
    if not isinstance(box, str):
        raise TypeError(f"preset must be a GpuBox or one of {', '.join(map(repr, GPU_BOXES))}, "
                        f"got {type(box).__name__} {box!r}")
    return GPU_BOXES[check_choice("preset", box, GPU_BOXES)]  # one line naming every box


@dataclass(frozen=True)
class NcclGraph:
    """What NCCL's search found for one algorithm: ``n_channels`` channels of ``bw_intra_gbps``
    GB/s each (``graph->nChannels``, ``graph->bwIntra``, ``graph->bwInter``) over paths of
    type ``path`` (``graph->typeIntra``: ``"NVL"`` through NVSwitch, ``"PCI"`` through PCIe
    switches and the CPU, ``"SYS"`` for NCCL's fallback graph)."""

    algorithm: str
    n_channels: int
    bw_intra_gbps: float
    bw_inter_gbps: float
    path: str

    @property
    def hop_class(self) -> str:
        """``"nvlink"`` or ``"pci"``: the row of NCCL's per-hop latency table
        (``ncclTopoTuneModel``: NVLink when ``typeIntra`` is NVL, PCI otherwise)."""
        return "nvlink" if self.path == "NVL" else "pci"

    @property
    def busbw_gbps(self) -> float:
        """``n_channels * bw_intra``: the bus bandwidth NCCL's model starts from."""
        return self.n_channels * self.bw_intra_gbps


def nccl_graphs(box: BoxLike, world_size: int, *,
                version: str | NcclConstants | None = None) -> dict[str, NcclGraph]:
    """The ring, tree and (where available) NVLS graphs for ``world_size`` GPUs of ``box``.

    ``version``: an NCCL release or an :class:`~distlab.nccl.versions.NcclConstants` whose
    Blackwell speed table applies (``None``: 2.28.9's, :data:`SPEEDS_INTRA`).
    Raises ``ValueError`` for ``world_size`` outside ``[2, box.gpus]`` (one GPU has no graph)
    or a release that is not one.
    """
    from distlab.nccl.versions import constants_or_none

    b = gpu_box(box)
    return box_graphs(b, check_int("world_size", world_size, minimum=2, maximum=b.gpus),
                      version=constants_or_none(version))


def box_graphs(b: GpuBox, n: int, *, version: NcclConstants | None = None) -> dict[str, NcclGraph]:
    """:func:`nccl_graphs` inside the model: ``b`` resolved and ``n`` checked (in
    ``[2, b.gpus]``) by the caller."""
    speeds = SPEEDS_INTRA[b.generation]
    if version is not None and b.generation == "blackwell":
        speeds = tuple(version.sm100_speeds_intra)
    ring = _search(b, "ring", n, 1, MAX_RING_CHANNELS, speeds)
    assert ring is not None, "GpuBox rejects links below NCCL's speed table"
    tree = _search(b, "tree", n, ring.n_channels, ring.n_channels, speeds)  # init.cc: = ring
    if tree is None:
        # search.cc: no tree at any speed -> one 0.1 GB/s channel over SYS paths ("falling
        # back to simple order"); init.cc then cuts the ring to the tree's channel count
        tree = NcclGraph("tree", 1, 0.1, 0.1, "SYS")
        ring = NcclGraph("ring", 1, ring.bw_intra_gbps, ring.bw_inter_gbps, ring.path)
    out = {"ring": ring, "tree": tree}
    if b.nvls_available(n):
        k = min(MAX_NVLS_ARITY, n)  # search.cc: intra-node NVLS pulls from every GPU
        nvls = _search(b, "nvls", n, k, k, speeds)
        if nvls is not None:  # init.cc: no NVLS graph, no NVLS
            out["nvls"] = nvls
    return out


def _channel_cost(box: GpuBox, pattern: str, ngpus: int) -> float:
    """GB/s of a GPU's link one channel of speed 1 uses, per direction.

    Ring and tree channels pass through each GPU once (in and out); an NVLS channel also pulls
    through every GPU and twice through its head GPU, and with one channel per head each link
    carries ``ngpus + 1`` channel-speeds (``ncclTopoSearchTryNvls``, multiplier 2 on the head).
    PCIe paths through an Intel root complex pay :data:`INTEL_P2P_OVERHEAD`.
    """
    if pattern == "nvls":
        return (ngpus + 1) / ngpus  # per channel, averaged over the ngpus channels
    return box.p2p_overhead


def _fits(box: GpuBox, pattern: str, ngpus: int, speed: float, max_channels: int) -> int:
    """Channels of ``speed`` GB/s the GPU's link holds (at most ``max_channels``)."""
    per_channel = speed * _channel_cost(box, pattern, ngpus)
    return min(max_channels, math.floor(box.nccl_link_gbps / per_channel + 1e-9))


def _search(box: GpuBox, pattern: str, ngpus: int, min_channels: int,
            max_channels: int, speeds: tuple[float, ...] | None = None) -> NcclGraph | None:
    """``ncclTopoCompute`` (``src/graph/search.cc``) on a symmetric box, step by step.

    Pass 1: start at the first speed ``s`` of the table with ``s <= maxBw`` and
    ``s * minChannels <= totalBw`` (``totalBw`` raised by ``n/(n-1)`` for non-ring patterns);
    keep the best graph (most ``channels * speed``) and lower the speed while the next one is
    more than 0.49 of the best so far, stopping early when the channels reach ``maxChannels``
    or ``channels * speed`` reaches the link. Then ``ncclTopoDupChannels`` doubles the
    channels at half speed when the speed is >= 25 GB/s (not for NVLS, nor for SM > 80 with a
    speed under 50 and more than 4 channels). Pass 2 tries higher speeds with the channel
    count fixed: rings raise both speeds, trees their intra speed, NVLS its inter speed.
    """
    link = box.nccl_link_gbps
    speeds = SPEEDS_INTRA[box.generation] if speeds is None else speeds
    total = link * ngpus / (ngpus - 1) if pattern != "ring" else link
    i = 0
    while (speeds[i] > link or speeds[i] * min_channels > total) and i < len(speeds) - 1:
        i += 1
    best_n, best_bw = 0, 0.0
    while True:
        n = _fits(box, pattern, ngpus, speeds[i], max_channels)
        if n >= min_channels and n * speeds[i] > best_n * best_bw:
            best_n, best_bw = n, speeds[i]
        if best_n and (n == max_channels or best_n * best_bw >= link):
            break
        if i < len(speeds) - 1 and (best_n == 0 or speeds[i + 1] / best_bw > 0.49):
            i += 1
            continue
        break
    if best_n == 0:
        return None
    bw_intra = bw_inter = best_bw
    if (pattern != "nvls" and bw_intra >= 25.0
            and not (box.sm > 80 and bw_intra < 50.0 and best_n > 4)):
        dup = min(2 * best_n, max_channels)
        bw_intra = bw_inter = bw_intra / math.ceil(dup / best_n)
        best_n = dup
    for s in [s for s in reversed(speeds) if s > bw_intra]:  # pass 2, speeds ascending
        fits = _fits(box, pattern, ngpus, s, max_channels)
        if pattern == "ring":  # every higher speed is tried; a success keeps its channels
            if fits >= best_n:
                best_n, bw_intra, bw_inter = fits, s, s
        elif pattern == "tree":  # raise bwIntra while the last raise succeeded (and only
            # from a speed of the table: NCCL restarts pass 2 from the table's entry)
            if bw_intra not in speeds or bw_intra >= 2 * bw_inter or fits < best_n:
                break
            bw_intra = s
        else:  # nvls: only bwInter rises; one node has no network link to check it against
            if bw_inter >= 2 * bw_intra:
                break
            bw_inter = s
    return NcclGraph(pattern, best_n, bw_intra, bw_inter, box.path)
