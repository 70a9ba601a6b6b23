"""How the GPUs of a box are connected, read from ``nvidia-smi topo -m`` (pure: text in, data out).

``nvidia-smi topo -m`` prints a matrix: one column per device (``GPU0`` ..., ``NIC0`` ...), then
``CPU Affinity``, ``NUMA Affinity`` and, on newer drivers, ``GPU NUMA ID``; one row per device;
each cell the path between two devices, best first:

- ``NV#``: a bonded set of # NVLinks (``NV18`` between every pair of an H100 SXM box),
- ``PIX``: at most one PCIe bridge (two GPUs under one switch),
- ``PXB``: several PCIe bridges, no host bridge,
- ``PHB``: through a PCIe host bridge (the CPU),
- ``NODE``: between host bridges within one NUMA node,
- ``SYS``: across the CPUs' interconnect between NUMA nodes (QPI/UPI, Infinity Fabric),
- ``X``: the device itself.

:func:`parse_topology` reads that text (tabs, an empty field or two, ANSI underline codes as the
real tool prints them) into a :class:`Topology`; :func:`peer_pairs` lists the ordered GPU pairs a
GPU-to-GPU copy matrix measures, or says in one line why there is none. :data:`FAKE_TOPOLOGIES`
holds the boxes the tests rehearse on: none of them was measured here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["FAKE_TOPOLOGIES", "PATH_ORDER", "Topology", "copy_route", "dgx_h100_like",
           "parse_topology", "path_rank", "pcie_two_switches", "peer_pairs", "single_gpu"]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_DEVICE = re.compile(r"^(GPU|NIC|NVSwitch|CPU)\d+$")
_NVLINK = re.compile(r"^NV(\d+)$")
_CPU_LIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")

#: paths from best to worst (``NV#`` of any width ranks first)
PATH_ORDER = ("X", "NV", "PIX", "PXB", "PHB", "NODE", "SYS")


def path_rank(path: str) -> int:
    """Position of ``path`` in :data:`PATH_ORDER` (``NV18`` -> 1); ``ValueError`` if unknown."""
    key = "NV" if _NVLINK.match(path) else path
    if key not in PATH_ORDER:
        raise ValueError(f"unknown topology path {path!r}: must be NV<links> or one of "
                         f"{[p for p in PATH_ORDER if p != 'NV']}")
    return PATH_ORDER.index(key)


@dataclass(frozen=True)
class Topology:
    """A box's devices and the path between each pair (``paths[(a, b)]``, names as printed),
    each GPU's NUMA node (None where the tool says N/A) and CPU list."""

    devices: tuple[str, ...]
    paths: dict[tuple[str, str], str] = field(default_factory=dict)
    numa: dict[str, int | None] = field(default_factory=dict)
    cpus: dict[str, str] = field(default_factory=dict)

    @property
    def gpus(self) -> tuple[str, ...]:
        """The GPU names in the order printed (``GPU0``, ``GPU1`` ...)."""
        return tuple(d for d in self.devices if d.startswith("GPU"))

    def path(self, a: int | str, b: int | str) -> str:
        """The path between two devices (GPU indices or names)."""
        key = (_name(a), _name(b))
        if key not in self.paths:
            raise ValueError(f"no path between {key[0]} and {key[1]} in this topology "
                             f"(devices: {', '.join(self.devices)})")
        return self.paths[key]

    def nvlinks(self, a: int | str, b: int | str) -> int:
        """How many NVLinks join two GPUs (0 where the path is PCIe or the CPUs)."""
        m = _NVLINK.match(self.path(a, b))
        return int(m.group(1)) if m else 0


def _name(device: int | str) -> str:
    return f"GPU{device}" if isinstance(device, int) else device


def parse_topology(text: str) -> Topology:
    """The matrix of ``nvidia-smi topo -m``'s output (the legend below it is ignored).

    Raises:
        ValueError: no header naming devices, a row with fewer cells than devices, a cell that is
            no known path, or a matrix that is not symmetric.
    """
    lines = [_ANSI.sub("", ln) for ln in text.splitlines()]
    head = next((i for i, ln in enumerate(lines) if "GPU0" in ln.split("\t")[:3]
                 or ln.strip().startswith("GPU0")), None)
    if head is None:
        raise ValueError("not the output of `nvidia-smi topo -m`: no header line naming GPU0")
    devices = tuple(t.strip() for t in lines[head].split("\t") if _DEVICE.match(t.strip()))
    paths: dict[tuple[str, str], str] = {}
    numa: dict[str, int | None] = {}
    cpus: dict[str, str] = {}
    for ln in lines[head + 1:]:
        if not ln.strip():
            break
        cells = [c.strip() for c in ln.split("\t")]
        name, rest = cells[0], cells[1:]
        if not _DEVICE.match(name):
            break
        if len(rest) < len(devices):
            raise ValueError(f"row {name} has {len(rest)} cells for {len(devices)} devices")
        for other, cell in zip(devices, rest[:len(devices)], strict=True):
            path_rank(cell)
            paths[(name, other)] = cell
        tail = [c for c in rest[len(devices):] if c]
        if name.startswith("GPU"):
            cpus[name] = tail[0] if tail and _CPU_LIST.match(tail[0]) else ""
            node = tail[1] if len(tail) > 1 else "N/A"
            numa[name] = int(node) if node.isdigit() else None
    for (a, b), p in paths.items():
        if (b, a) in paths and paths[(b, a)] != p:
            raise ValueError(f"asymmetric topology: {a}->{b} is {p}, {b}->{a} is {paths[(b, a)]}")
    return Topology(devices, paths, numa, cpus)


def peer_pairs(topo: Topology | None, n_gpus: int) -> tuple[list[tuple[int, int]], str | None]:
    """The ordered GPU pairs ``(src, dst)``, src != dst, a GPU-to-GPU copy matrix measures on a
    box of ``n_gpus`` GPUs, and None; or no pairs and why (one line), as fewer than two GPUs, or
    a topology naming a different number of GPUs, give."""
    if isinstance(n_gpus, bool) or not isinstance(n_gpus, int) or n_gpus < 0:
        raise ValueError(f"n_gpus must be a whole number >= 0, got {n_gpus!r}")
    if n_gpus < 2:
        return [], (f"skipped: GPU-to-GPU copies need two GPUs, this box has {n_gpus}")
    if topo is not None and len(topo.gpus) != n_gpus:
        return [], (f"skipped: nvidia-smi topo -m names {len(topo.gpus)} GPUs, torch sees "
                    f"{n_gpus} (CUDA_VISIBLE_DEVICES?); pairs could not be labelled")
    return [(a, b) for a in range(n_gpus) for b in range(n_gpus) if a != b], None


def copy_route(topo: Topology | None, src: int, dst: int, *, peer_access: bool) -> str:
    """How a device-to-device copy from ``src`` to ``dst`` travels, for the matrix's label:
    ``peer over <path>`` where peer access is on (``torch.cuda.can_device_access_peer``), else
    ``staged through host memory`` (the driver copies via a host buffer: two PCIe crossings),
    whatever the topology says the link is."""
    if not peer_access:
        return "staged through host memory (peer access off)"
    return f"peer over {topo.path(src, dst) if topo is not None else 'an unlabelled path'}"


def _matrix(names: list[str], cell, numa: list[int | None], cpus: list[str]) -> str:
    head = "\t" + "\t".join(names) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"
    rows = [f"{a}\t" + "\t".join(" X " if a == b else cell(i, j) for j, b in enumerate(names))
            + f"\t{cpus[i]}\t{numa[i]}\t\tN/A" for i, a in enumerate(names)]
    return "\n".join([head, *rows, "", "Legend:", "", "  X    = Self"])


def dgx_h100_like() -> str:
    """A DGX-H100-like ``topo -m``: 8 GPUs, ``NV18`` between every pair, GPUs 0-3 on NUMA node 0
    and 4-7 on node 1 (a fake for tests, shaped as the real tool prints; not measured)."""
    names = [f"GPU{i}" for i in range(8)]
    return _matrix(names, lambda i, j: "NV18", [i // 4 for i in range(8)],
                   ["0-55,112-167" if i < 4 else "56-111,168-223" for i in range(8)])


def pcie_two_switches() -> str:
    """A PCIe box: 4 GPUs, two per switch (``PIX`` within a switch), the switches on different
    NUMA nodes (``SYS`` across): a fake for tests."""
    names = [f"GPU{i}" for i in range(4)]
    return _matrix(names, lambda i, j: "PIX" if i // 2 == j // 2 else "SYS",
                   [i // 2 for i in range(4)], ["0-15" if i < 2 else "16-31" for i in range(4)])


def single_gpu() -> str:
    """One GPU, as the committed H100 profile's ``topo -m`` shows it."""
    return "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-15\t0\t\tN/A\n"


FAKE_TOPOLOGIES = {"dgx_h100_like": dgx_h100_like, "pcie_two_switches": pcie_two_switches,
                   "single_gpu": single_gpu}
