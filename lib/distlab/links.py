"""The one table of links distlab models: each link's peak bandwidth per direction and its source.

Keys are ``<family><gen>_<what>``: ``pcie4_x16``, ``nvlink4_h100``, ``ethernet_100g``. The
transfer lab draws them as ceilings of copy curves; the collectives' link presets
(:mod:`distlab.collectives.model.presets`) take their per-byte cost from them. GB/s = 1e9 bytes/s.
"""

from __future__ import annotations

from dataclasses import dataclass

from distlab._checks import check_choice, check_float, check_int

__all__ = ["LINKS", "Link", "NIC_GBPS_MAX", "check_nic_gbps", "fraction_of_peak", "get_link",
           "link_from_pcie", "pcie_gbps"]

_PCIE_GTS = {3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}   # GT/s per lane (PCI-SIG base specifications)


@dataclass(frozen=True)
class Link:
    """A link's peak GB/s per direction (``gbps``) and where that figure comes from."""

    name: str
    gbps: float
    source: str

    @property
    def seconds_per_byte(self) -> float:
        """1 / (peak bytes per second): the textbook beta of this link."""
        return 1.0 / (self.gbps * 1e9)


def pcie_gbps(gen: int, width: int) -> float:
    """Raw per-direction GB/s of a PCIe link: GT/s x lanes x 128/130 encoding / 8 bits
    (generations 3 to 6 as PCI-SIG states their transfer rates; gen 6's FLIT encoding is
    counted like 128b/130b, within 2%)."""
    gen = check_choice("gen (PCIe generation)", gen, list(_PCIE_GTS))
    width = check_int("width (PCIe lanes)", width, minimum=1)
    return _PCIE_GTS[gen] * width * 128 / 130 / 8


LINKS: dict[str, Link] = {
    "pcie3_x16": Link("PCIe Gen3 x16", pcie_gbps(3, 16),
                      "PCI-SIG PCIe 3.0: 8 GT/s/lane, 128b/130b, 16 lanes, per direction"),
    "pcie4_x16": Link("PCIe Gen4 x16", pcie_gbps(4, 16),
                      "PCI-SIG PCIe 4.0: 16 GT/s/lane, 128b/130b, 16 lanes, per direction"),
    "pcie5_x16": Link("PCIe Gen5 x16", pcie_gbps(5, 16),
                      "PCI-SIG PCIe 5.0: 32 GT/s/lane, 128b/130b, 16 lanes, per direction"),
    "h100_sxm_host": Link("H100 SXM host link", 64.0,
                          "NVIDIA H100 datasheet: PCIe Gen5 128 GB/s bidirectional"),
    "nvlink3_a100": Link("NVLink 3 (A100 SXM)", 300.0,
                         "NVIDIA A100 datasheet: NVLink 600 GB/s bidirectional (12 links)"),
    "nvlink4_h100": Link("NVLink 4 (H100 SXM)", 450.0,
                         "NVIDIA H100 datasheet: NVLink 900 GB/s bidirectional (18 links)"),
    "ethernet_100g": Link("100 GbE", 12.5, "IEEE 802.3: 100 Gbit/s line rate = 12.5 GB/s"),
}


def get_link(key: str) -> Link:
    """The link called ``key``; ``ValueError`` listing the keys otherwise."""
    return LINKS[check_choice("link", key, list(LINKS))]


def link_from_pcie(gen: int, width: int) -> Link:
    """The :class:`Link` for a PCIe generation and lane count (as ``nvidia-smi`` reports them)."""
    if gen not in _PCIE_GTS or isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise ValueError(f"unknown PCIe link gen {gen} x{width}: gen must be one of "
                         f"{sorted(_PCIE_GTS)} and width a whole number >= 1")
    return Link(f"PCIe Gen{gen} x{width}", pcie_gbps(gen, width),
                f"nvidia-smi pcie.link.gen/width.current; PCI-SIG {_PCIE_GTS[gen]:g} GT/s/lane")


def fraction_of_peak(gbps: float, link: Link) -> float:
    """Measured GB/s as a fraction of the link's per-direction peak."""
    return check_float("gbps", gbps, minimum=0) / link.gbps


NIC_GBPS_MAX = 100.0
"""The fastest network port sold, GB/s per direction: 800 Gb/s (NVIDIA ConnectX-8, Broadcom Thor
Ultra) = 100 GB/s. A NIC rate above it is a rate in Gb/s given as GB/s."""


def check_nic_gbps(value: float, name: str = "nic_gbps") -> float:
    """One network port's rate in GB/s (1e9 bytes per second, per direction), in
    ``(0, NIC_GBPS_MAX]``: what every NIC argument of distlab takes. A ``ValueError`` names the
    unit and, for a value above the range, the GB/s of that many Gb/s (``400`` -> "a 400 Gb/s
    NIC is 50 GB/s")."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > NIC_GBPS_MAX:
        raise ValueError(f"{name} is one NIC port's rate in GB/s (bytes), in (0, "
                         f"{NIC_GBPS_MAX:g}] (800 Gb/s, the fastest port sold); got {value:g}: "
                         f"a {value:g} Gb/s NIC is {value / 8:g} GB/s")
    return check_float(f"{name} (one NIC port's GB/s)", value, minimum=0.0,
                       exclusive_minimum=True, maximum=NIC_GBPS_MAX)
