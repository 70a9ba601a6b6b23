"""Link presets: alpha, beta, gamma for typical links, each labelled with where its figure is from.

Link bandwidths come from the one link table, :mod:`distlab.links` (same keys). Figures from
datasheets are peak rates; real collectives reach less, so treat these presets as
optimistic models for "who wins where", not predictions of a particular machine. The
``loopback`` preset is the machine the committed results were measured on, measured by
:func:`distlab.collectives.calibrate` and shipped inside the package as
``distlab/data/allreduce_calibration.json`` (read with :mod:`importlib.resources`, so it loads
from a wheel or any install, not only from a source checkout).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from distlab._checks import check_choice
from distlab.links import get_link
from distlab.report.jsonfile import read_json
from distlab.vocabulary import gb_per_s

__all__ = ["LinkPreset", "PRESETS", "get_preset", "loopback_preset", "preset_names"]

CALIBRATION_RESOURCE = ("distlab", "data/allreduce_calibration.json")  # (package, path inside)

def _packaged_calibration() -> Any:
    """The shipped calibration file as an :mod:`importlib.resources` Traversable."""
    package, name = CALIBRATION_RESOURCE
    return resources.files(package).joinpath(name)


@dataclass(frozen=True)
class LinkPreset:
    """A named (alpha s, beta s/byte, gamma s/byte reduced) with the source of each figure.

    ``duplex`` is the link model its beta belongs to (see :func:`distlab.collectives.model.cost`):
    ``"full"`` for the hardware presets, ``"shared"`` for the calibrated loopback. ``link`` is
    the key of :data:`distlab.links.LINKS` its beta comes from ("" for a measured preset).
    """

    name: str
    alpha: float
    beta: float
    gamma: float
    source: str
    duplex: str = "full"
    link: str = ""

    @property
    def bandwidth_gbps(self) -> float:
        """1 / beta in GB/s."""
        return gb_per_s(1.0, self.beta)


# What a copy engine reaches of a PCIe link's peak, measured by distlab's transfer lab: pinned
# host-to-device on an H100's PCIe Gen5 x16 link, 55.24 of 63.0 GB/s (results/transfers_h100.json).
PCIE_ACHIEVED_FRACTION = 0.87


def _from_link(key: str, alpha: float, gamma: float, fraction: float, why: str) -> LinkPreset:
    link = get_link(key)
    share = "" if fraction == 1.0 else f" x {fraction:g} achieved"
    return LinkPreset(link.name, alpha=alpha, beta=1.0 / (fraction * link.gbps * 1e9),
                      gamma=gamma, link=key,
                      source=f"beta: {link.gbps:.1f} GB/s per direction ({link.source}){share}; "
                             + why)


PRESETS: dict[str, LinkPreset] = {
    "pcie4_x16": _from_link(
        "pcie4_x16", 5e-6, 1 / 500e9, PCIE_ACHIEVED_FRACTION,
        "fraction achieved: pinned h2d measured by distlab on a PCIe Gen5 x16 H100 (87% of "
        "peak); alpha: 5 us, an assumed NCCL step latency; gamma: a GPU reducing at 500 GB/s "
        "effective (assumption, ~1/3 of A100 HBM2e 1.5 TB/s since a reduce reads two operands "
        "and writes one)"),
    "nvlink4_h100": _from_link(
        "nvlink4_h100", 3e-6, 1 / 1100e9, 1.0,
        "alpha: 3 us, an assumed NCCL step latency; gamma: H100 SXM HBM3 3.35 TB/s (datasheet) "
        "/ 3 bytes moved per reduced byte"),
    "ethernet_100g": _from_link(
        "ethernet_100g", 10e-6, 1 / 500e9, 1.0,
        "alpha: 10 us, an assumed RDMA round through NIC and switch; gamma: GPU reduction as "
        "for pcie4_x16"),
}


def loopback_preset(path: str | Path | None = None) -> LinkPreset | None:
    """gloo loopback from a calibration JSON (default: the one shipped in the package), or
    ``None`` if ``path`` does not exist.

    The JSON is what ``python -m distlab.bench allreduce --json`` writes (key ``calibration``)
    or a :class:`~distlab.collectives.model.calibration.Calibration` dict written by
    :func:`~distlab.report.jsonfile.write_json`; a file of another results schema raises
    :class:`~distlab.report.jsonfile.SchemaError`.
    """
    p = Path(path) if path is not None else _packaged_calibration()
    if not p.is_file():
        return None
    data = read_json(p)
    cal = data.get("calibration", data)
    prov = data.get("provenance", {})
    where = f"{prov.get('host', '?')} {prov.get('device', '')} {prov.get('date', '')}".strip()
    return LinkPreset(
        f"loopback ({cal.get('backend', 'gloo')}, world size {cal.get('world_size', '?')})",
        alpha=float(cal["alpha"]), beta=float(cal["beta"]), gamma=float(cal["gamma"]),
        duplex=str(cal.get("duplex", "full")),
        source=f"measured by distlab.collectives.calibrate() ({cal.get('pattern', 'exchange')} "
               f"pattern) on {where}; fit R^2 comm {cal.get('comm_r2', float('nan')):.3f}, "
               f"reduce {cal.get('reduce_r2', float('nan')):.3f}; file {p.name}")


def preset_names() -> list[str]:
    """Names :func:`get_preset` accepts (``loopback`` only when its file exists)."""
    return list(PRESETS) + (["loopback"] if loopback_preset() is not None else [])


def get_preset(name: str) -> LinkPreset:
    """The preset called ``name``; ``ValueError`` listing the valid names otherwise."""
    if name == "loopback":
        lp = loopback_preset()
        if lp is not None:
            return lp
    return PRESETS[check_choice("preset", name, preset_names())]
