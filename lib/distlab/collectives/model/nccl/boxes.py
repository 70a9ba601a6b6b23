"""GPU boxes we cannot reach, and the graphs NCCL's topology search finds on them.

A :class:`GpuBox` is one node of ``gpus`` GPUs joined by one kind of switch: NVSwitch (every GPU's
NVLinks go to the switches) or PCIe switches under one CPU. :func:`nccl_graphs` returns, per
NCCL algorithm, the *graph* NCCL's ``ncclTopoCompute`` settles on for ``world_size`` GPUs of the
box: how many channels and how many GB/s each channel may use. NCCL's tuning model
(:mod:`distlab.collectives.model.nccl.estimate`) turns those graphs into latencies and bandwidths.

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
from dataclasses import dataclass
from typing import Any

from distlab._checks import check_choice, check_int

__all__ = ["GPU_BOXES", "NCCL_TAG", "GpuBox", "NcclGraph", "gpu_box", "nccl_graphs"]

NCCL_TAG = "v2.28.9-1"
"""The NVIDIA/nccl git tag every NCCL constant in this module and
:mod:`distlab.collectives.model.nccl.estimate` is from."""

#: GB/s NCCL credits one NVLink link with, by compute capability (``src/graph/topo.h``:
#: ``SM80_NVLINK_BW``, ``SM90_NVLINK_BW``, ``SM100_NVLINK_BW``).
NVLINK_GBPS_PER_LINK = {80: 20.0, 90: 20.6, 100: 40.1}

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
        cpu_vendor: ``"amd"`` or ``"intel"``; matters on PCIe only (:data:`INTEL_P2P_OVERHEAD`).
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

    def __post_init__(self) -> None:
        check_int("gpus", self.gpus, minimum=1)
        check_choice("sm", self.sm, (80, 90, 100, 120))
        check_choice("fabric", self.fabric, ("nvswitch", "pcie"))
        check_choice("cpu_vendor", self.cpu_vendor, ("amd", "intel"))
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
        """GB/s per direction NCCL credits the GPU's link with (see module doc)."""
        if self.fabric == "nvswitch":
            return self.nvlinks * NVLINK_GBPS_PER_LINK[min(self.sm, 100)]
        return self.pcie_lanes * PCIE_RATE_PER_LANE[self.pcie_gen] / 80.0

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
}


def gpu_box(box: Any) -> GpuBox:
    """``box`` itself if it is a :class:`GpuBox`, else the preset of :data:`GPU_BOXES` it names."""
    if isinstance(box, GpuBox):
        return box
    if not isinstance(box, str):
        raise TypeError(f"preset must be a GpuBox or one of {', '.join(map(repr, GPU_BOXES))}, "
                        f"got {type(box).__name__} {box!r}")
    return GPU_BOXES[check_choice("preset", box, GPU_BOXES)]


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


def nccl_graphs(box: Any, world_size: int) -> dict[str, NcclGraph]:
    """The ring, tree and (where available) NVLS graphs for ``world_size`` GPUs of ``box``.

    Raises ``ValueError`` for ``world_size`` outside ``[2, box.gpus]`` (one GPU has no graph).
    """
    b = gpu_box(box)
    n = check_int("world_size", world_size, minimum=2, maximum=b.gpus)
    ring = _search(b, "ring", n, min_channels=1, max_channels=MAX_RING_CHANNELS)
    assert ring is not None, "GpuBox rejects links below NCCL's speed table"
    tree = _search(b, "tree", n, ring.n_channels, ring.n_channels)  # init.cc: tree = ring chans
    if tree is None:
        # search.cc: no tree at any speed -> one 0.1 GB/s channel over SYS paths ("falling
        # back to simple order"); init.cc then cuts the ring to the tree's channel count
        tree = NcclGraph("tree", 1, 0.1, 0.1, "SYS")
        ring = NcclGraph("ring", 1, ring.bw_intra_gbps, ring.bw_inter_gbps, ring.path)
    out = {"ring": ring, "tree": tree}
    if b.nvls_available(n):
        k = min(MAX_NVLS_ARITY, n)  # search.cc: intra-node NVLS pulls from every GPU
        nvls = _search(b, "nvls", n, k, k)
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
            max_channels: int) -> NcclGraph | None:
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
    speeds = SPEEDS_INTRA[box.generation]
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
    path = "NVL" if box.fabric == "nvswitch" else "PCI"
    return NcclGraph(pattern, best_n, bw_intra, bw_inter, path)
