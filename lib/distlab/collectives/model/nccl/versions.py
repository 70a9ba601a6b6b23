"""The NCCL constants that changed between 2.18 and 2.28, per version.

NCCL's tuning model (:mod:`~distlab.collectives.model.nccl.estimate`) and its execution
(:mod:`~distlab.collectives.model.nccl.execution`) are written from NVIDIA/nccl ``v2.28.9-1``. The
published tables were measured with older NCCLs, and what NCCL chooses and how fast it runs moved
between them. :class:`NcclVersion` holds, per release, what differs for one node (every value
read from ``git show <tag>:<file>``; file and function beside each field):

=======================  ==========  ==========  ==========  ==========  ==========  ==========
field                    2.18.5      2.20.5      2.24.3      2.26.2      2.27.5      2.28.9
=======================  ==========  ==========  ==========  ==========  ==========  ==========
NVLS latency (us)        23 (base)   23 (hw)     25          25          25          25
Tree Simple base (us)    0           0           8.4         8.4         8.4         8.4
Tree Simple hop NVL/PCI  4 / 6       28 / 28     4 / 4       4 / 4       4 / 4       4 / 4
Ring LL busbw factor     1/4         1/4         1/2         1/2         1/2         1/2
LL max busbw, Hopper     87.7        87.7        141         141         141         141
Blackwell row            no          no          no          yes         yes         yes
NVLS bandwidth           generic     min(i, o)   min(i, o)   min(i, o)   min(i, o)   efficiency
LL128 default arches     70/80/90    70/80/90    70/80/90    70-100 [1]  >= 70       >= 70
MAXCHANNELS              32          32          32          64          64          64
NVLS needs GPUs          >= 3        >= 3        >= 3        >= 3        >= 3        >= 2
=======================  ==========  ==========  ==========  ==========  ==========  ==========

[1] compute capability 70, 80, 90 and 100 (``tuning.cc``'s switch); the boxes modelled are 80, 90
and 120, where that is the same as 70/80/90.

Not modelled per version (stated, not NCCL's): the topology search (``src/graph/search.cc``) is
the 2.28.9 one for every version, and multi-node terms are the 2.28.9 ones.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_NCCL_VERSION", "NCCL_VERSIONS", "NcclVersion", "nccl_version"]


@dataclass(frozen=True)
class NcclVersion:
    """What one NCCL release's single-node allreduce model differs in (see the module table).

    Attributes:
        tag: the NVIDIA/nccl git tag read.
        nvls_latency_us: NVLS's fixed latency on one node (``tuning.cc``: ``baseLat`` NVLS
            23 in 2.18.5; ``hwLat[NVLINK][NVLS]`` 23 in 2.20.5, 25 from 2.24.3).
        tree_simple_base_us: ``baseLat[TREE][SIMPLE]`` (``tuning.cc``).
        tree_simple_hop_us: ``hwLat[NVLINK|PCI][TREE][SIMPLE]``, per hop class.
        ring_ll_fraction: ring LL bus bandwidth per link bandwidth (``ncclTopoTuneModel``: 1/4
            for an allreduce up to 2.20.5, 0.5 from 2.24.3).
        ll_max_hopper_gbps: ``llMaxBws`` Hopper single-node row (87.7 up to 2.20.5, 141 from
            2.24.3).
        blackwell_row: whether compute capability >= 100 has its own tables (``compCapIndex`` 3,
            from 2.26.2); before, such GPUs read the Hopper row.
        nvls_bandwidth: how NVLS bus bandwidth is computed: ``"generic"`` (``nChannels *
            bwIntra``, algorithm bandwidth 5/6 of it; 2.18.5), ``"min"`` (``nChannels *
            min(bwIntra, bwInter)``, 5/6; 2.20.5-2.27.5) or ``"efficiency"`` (2.28.9's
            ``nvlsEfficiency`` formula, the ring's ratio).
        ll128_all_arches: LL128 on by default for every compute capability >= 70 (from 2.27.5;
            before only 70, 80 and 90, and 100 in 2.26.2).
        max_channels: ``MAXCHANNELS`` (``device.h``: 32 up to 2.24.3, 64 from 2.26.2).
        nvls_min_gpus: fewest GPUs NVLS initializes on (``src/transport/nvls.cc``
            ``ncclNvlsInit``: ``gpuCount <= 2`` disables it up to 2.27.5, ``< 2`` in 2.28.9).
    """

    tag: str
    nvls_latency_us: float
    tree_simple_base_us: float
    tree_simple_hop_us: tuple[tuple[str, float], ...]
    ring_ll_fraction: float
    ll_max_hopper_gbps: float
    blackwell_row: bool
    nvls_bandwidth: str
    ll128_all_arches: bool
    max_channels: int
    nvls_min_gpus: int

    @property
    def release(self) -> str:
        """``"2.18.5"`` for tag ``v2.18.5-1``."""
        return self.tag[1:].split("-")[0]

    def tree_hop_us(self, hop_class: str) -> float:
        """``hwLat[hop_class][TREE][SIMPLE]``, us."""
        return dict(self.tree_simple_hop_us)[hop_class]


NCCL_VERSIONS: dict[str, NcclVersion] = {
    "2.18": NcclVersion("v2.18.5-1", 23.0, 0.0, (("nvlink", 4.0), ("pci", 6.0)), 0.25, 87.7,
                        False, "generic", False, 32, 3),
    "2.20": NcclVersion("v2.20.5-1", 23.0, 0.0, (("nvlink", 28.0), ("pci", 28.0)), 0.25, 87.7,
                        False, "min", False, 32, 3),
    "2.24": NcclVersion("v2.24.3-1", 25.0, 8.4, (("nvlink", 4.0), ("pci", 4.0)), 0.5, 141.0,
                        False, "min", False, 32, 3),
    "2.26": NcclVersion("v2.26.2-1", 25.0, 8.4, (("nvlink", 4.0), ("pci", 4.0)), 0.5, 141.0,
                        True, "min", False, 64, 3),
    "2.27": NcclVersion("v2.27.5-1", 25.0, 8.4, (("nvlink", 4.0), ("pci", 4.0)), 0.5, 141.0,
                        True, "min", True, 64, 3),
    "2.28": NcclVersion("v2.28.9-1", 25.0, 8.4, (("nvlink", 4.0), ("pci", 4.0)), 0.5, 141.0,
                        True, "efficiency", True, 64, 2),
}
"""One entry per NCCL minor release modelled, keyed ``"2.18"`` ... ``"2.28"``."""

DEFAULT_NCCL_VERSION = "2.28"
"""NCCL 2.28.9: the NCCL of torch 2.11's CUDA wheels, which the project's H100 profile records
(torch 2.13's CPU wheel, the one on these machines, carries no NCCL)."""


def nccl_version(version: str | NcclVersion | None = None) -> NcclVersion:
    """The :class:`NcclVersion` for ``"2.24"``, ``"2.24.3"``, ``"v2.24.3-1"`` or an
    :class:`NcclVersion` itself; ``None``: :data:`DEFAULT_NCCL_VERSION`. A patch release maps to
    its minor release's entry (the constants above do not change within one)."""
    if isinstance(version, NcclVersion):
        return version
    if version is None:
        return NCCL_VERSIONS[DEFAULT_NCCL_VERSION]
    if not isinstance(version, str):
        raise TypeError(f"nccl_version must be a string like '2.24' or None, got "
                        f"{type(version).__name__} {version!r}")
    text = version.strip().lstrip("v").split("-")[0]
    key = ".".join(text.split(".")[:2])
    if key not in NCCL_VERSIONS:
        raise ValueError(f"nccl_version must be one of {', '.join(NCCL_VERSIONS)} (or a patch "
                         f"release of one, e.g. '2.24.3'), got {version!r}")
    return NCCL_VERSIONS[key]
