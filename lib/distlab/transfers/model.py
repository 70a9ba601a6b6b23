"""Transfer model: ``t(n) = latency + n / bandwidth`` per path, chain and overlap bounds, links.

Units: bytes, seconds, GB/s = 1e9 B/s.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from distlab._checks import check_float, check_int

__all__ = ["Fit", "fit_line", "chain_bound", "overlap_bounds", "LINKS", "Link", "pcie_link",
           "link_from_pcie", "fraction_of_peak"]


@dataclass(frozen=True)
class Fit:
    """Least-squares fit of seconds against bytes: ``latency_s + nbytes / bandwidth_Bps``."""

    latency_s: float
    bandwidth_Bps: float
    r2: float

    def seconds(self, nbytes: float) -> float:
        """Predicted seconds for ``nbytes`` bytes."""
        return self.latency_s + nbytes / self.bandwidth_Bps

    def gbps(self, nbytes: float) -> float:
        """Predicted effective GB/s (1e9 B/s) at ``nbytes``."""
        return nbytes / self.seconds(nbytes) / 1e9


def fit_line(nbytes: Sequence[float], seconds: Sequence[float]) -> Fit:
    """Fit ``t = a + n / B`` by least squares weighted by ``1/t`` (relative error, so small and
    large sizes count alike); ``latency_s`` is clamped at 0. Needs >= 2 distinct sizes."""
    n = np.asarray(nbytes, dtype=float)
    t = np.asarray(seconds, dtype=float)
    if n.shape != t.shape or n.size < 2 or np.unique(n).size < 2:
        raise ValueError("need >= 2 distinct sizes with one time each")
    if not (np.all(np.isfinite(t)) and np.all(t > 0) and np.all(n > 0)):
        raise ValueError("sizes and times must be finite and > 0")
    w = 1.0 / t
    a_mat = np.stack([np.ones_like(n), n], axis=1) * w[:, None]
    (a, slope), *_ = np.linalg.lstsq(a_mat, t * w, rcond=None)
    if slope <= 0:
        raise ValueError("fitted bandwidth is not positive: times do not grow with size")
    if a < 0:  # refit the slope through the origin
        a, slope = 0.0, float(np.sum(w * w * n * t) / np.sum(w * w * n * n))
    pred = a + slope * n
    ss_res = float(np.sum((t - pred) ** 2))
    ss_tot = float(np.sum((t - t.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    return Fit(float(a), float(1.0 / slope), r2)


def chain_bound(stage_gbps: Mapping[str, float]) -> tuple[str, float]:
    """The slowest stage of a chain (disk -> pageable -> pinned -> GPU) and its GB/s: a
    pipelined chain cannot move bytes faster than that."""
    if not stage_gbps:
        raise ValueError("need at least one stage")
    name = min(stage_gbps, key=lambda k: stage_gbps[k])
    return name, stage_gbps[name]


def overlap_bounds(copy_s: float, compute_s: float, batches: int) -> dict[str, float]:
    """Seconds for ``batches`` batches: ``sequential = n (copy + compute)``; double-buffered
    ``overlapped = copy + compute + (n - 1) max(copy, compute)``."""
    copy_s = check_float("copy_s (seconds)", copy_s, minimum=0)
    compute_s = check_float("compute_s (seconds)", compute_s, minimum=0)
    batches = check_int("batches", batches, minimum=1)
    return {"sequential_s": batches * (copy_s + compute_s),
            "overlapped_s": copy_s + compute_s + (batches - 1) * max(copy_s, compute_s)}


@dataclass(frozen=True)
class Link:
    """A link's peak GB/s per direction and where that figure comes from."""

    name: str
    gbps: float
    source: str


_PCIE_GTS = {3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}   # GT/s per lane (PCI-SIG base specs)


def _pcie_gbps(gen: int, width: int) -> float:
    """Raw per-direction GB/s: GT/s x lanes x 128/130 encoding / 8 bits (gen 3-5)."""
    return _PCIE_GTS[gen] * width * 128 / 130 / 8


LINKS: dict[str, Link] = {
    "pcie3x16": Link("PCIe Gen3 x16", _pcie_gbps(3, 16),
                     "PCI-SIG PCIe 3.0: 8 GT/s/lane, 128b/130b, 16 lanes, per direction"),
    "pcie4x16": Link("PCIe Gen4 x16", _pcie_gbps(4, 16),
                     "PCI-SIG PCIe 4.0: 16 GT/s/lane, 128b/130b, 16 lanes, per direction"),
    "pcie5x16": Link("PCIe Gen5 x16", _pcie_gbps(5, 16),
                     "PCI-SIG PCIe 5.0: 32 GT/s/lane, 128b/130b, 16 lanes, per direction"),
    "h100_sxm_host": Link("H100 SXM host link", 64.0,
                          "NVIDIA H100 datasheet: PCIe Gen5 128 GB/s bidirectional"),
    "nvlink4_h100": Link("NVLink 4 (H100)", 450.0,
                         "NVIDIA H100 datasheet: NVLink 900 GB/s bidirectional"),
}


def pcie_link(run: bool = True) -> tuple[int, int] | None:
    """``(generation, width)`` of GPU 0's current PCIe link from ``nvidia-smi``, or ``None``."""
    if not run or shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=pcie.link.gen.current,"
                              "pcie.link.width.current", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
        gen, width = (int(x) for x in out.splitlines()[0].split(","))
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None
    return gen, width


def link_from_pcie(gen: int, width: int) -> Link:
    """The :class:`Link` for a PCIe generation and lane count (as reported by ``nvidia-smi``)."""
    if gen not in _PCIE_GTS or width < 1:
        raise ValueError(f"unknown PCIe link gen {gen} x{width}")
    return Link(f"PCIe Gen{gen} x{width}", _pcie_gbps(gen, width),
                f"nvidia-smi pcie.link.gen/width.current; PCI-SIG {_PCIE_GTS[gen]:g} GT/s/lane")


def fraction_of_peak(gbps: float, link: Link) -> float:
    """Measured GB/s as a fraction of the link's per-direction peak."""
    return gbps / link.gbps
