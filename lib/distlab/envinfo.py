"""What this machine offers distributed training: torch, CPU cores, CUDA devices, backends;
and where distlab was installed from (:func:`source_checkout`, :func:`committed_results`).

The start-here notebook prints :func:`environment_report` before its first live allreduce.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

import torch
import torch.distributed as dist

from distlab.vocabulary import size_in

__all__ = ["CudaDevice", "EnvironmentReport", "committed_results", "cpus_allowed",
           "environment_report", "machine_facts", "cpu_model", "memory_bytes", "gpu_topology",
           "pcie_links", "nccl_version", "source_checkout"]


def source_checkout(distribution: str = "distlab") -> Path | None:
    """The folder ``distribution`` was installed from, where it was installed editable (``pip
    install -e``, as ``make install`` does), read from the install's record
    (``direct_url.json``, PEP 610); ``None`` for any other install (a wheel, a registry), a
    record that names no local folder, or a folder that is gone."""
    try:
        text = metadata.distribution(distribution).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    try:
        record = json.loads(text or "")
    except ValueError:
        return None
    if not isinstance(record, dict) or not (record.get("dir_info") or {}).get("editable"):
        return None
    url = urlparse(str(record.get("url", "")))
    if url.scheme != "file" or url.netloc not in ("", "localhost"):
        return None
    folder = Path(unquote(url.path))
    return folder if folder.is_dir() else None


def committed_results(name: str) -> Path | None:
    """The folder ``results/<name>`` of :func:`source_checkout`: measurements committed beside
    the code, which an install from a wheel does not carry. ``None`` where distlab was not
    installed from a checkout, or the checkout has no such folder. ``name`` is one folder's
    name (no separators)."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a str (a folder under results/), got {type(name).__name__}")
    if not name or "/" in name or "\\" in name or name in (".", ".."):
        raise ValueError(f"name must be one folder's name under results/, got {name!r}")
    checkout = source_checkout()
    if checkout is None:
        return None
    folder = checkout / "results" / name
    return folder if folder.is_dir() else None


def cpus_allowed() -> int | None:
    """CPUs this process may run on (``taskset``/cgroup affinity; less than the host's cores for
    a pinned run), or None where the OS does not say."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return None


@dataclass(frozen=True)
class CudaDevice:
    """One CUDA device as torch sees it. ``total_memory_bytes`` in bytes."""

    index: int
    name: str
    total_memory_bytes: int
    capability: tuple[int, int]


@dataclass(frozen=True)
class EnvironmentReport:
    """The facts the notebooks branch on (which backend, which copy path)."""

    python: str
    torch_version: str
    cpu_cores: int
    cuda_devices: list[CudaDevice] = field(default_factory=list)
    backends: dict[str, tuple[bool, str]] = field(default_factory=dict)

    def lines(self) -> list[str]:
        """The report as aligned text lines (what the notebook prints)."""
        out = [f"python        {self.python}",
               f"torch         {self.torch_version}",
               f"cpu cores     {self.cpu_cores}"]
        if self.cuda_devices:
            for d in self.cuda_devices:
                memory = size_in(d.total_memory_bytes, "GiB", ".1f")
                out.append(f"cuda:{d.index:<8} {d.name}, {memory}, "
                           f"sm_{d.capability[0]}{d.capability[1]}")
        else:
            out.append("cuda          no CUDA device visible to torch")
        for name, (ok, why) in self.backends.items():
            out.append(f"{name:<13} {'usable' if ok else 'not usable'}: {why}")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


def environment_report() -> EnvironmentReport:
    """Inspect torch, CPU and CUDA; say which torch.distributed backends can run here."""

    devices: list[CudaDevice] = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            devices.append(CudaDevice(i, p.name, int(p.total_memory), (p.major, p.minor)))
    backends: dict[str, tuple[bool, str]] = {}
    if not dist.is_available():
        backends["gloo"] = (False, "torch.distributed is not built")
        backends["nccl"] = (False, "torch.distributed is not built")
    else:
        backends["gloo"] = ((True, "CPU tensors, any number of local ranks")
                            if dist.is_gloo_available() else (False, "not in this torch build"))
        if not dist.is_nccl_available():
            backends["nccl"] = (False, "not in this torch build (CPU wheel?)")
        elif not devices:
            backends["nccl"] = (False, "built, but no CUDA device")
        else:
            backends["nccl"] = (True, f"up to {len(devices)} local ranks (one per GPU)")
    return EnvironmentReport(
        python=platform.python_version(),
        torch_version=torch.__version__,
        cpu_cores=os.cpu_count() or 1,
        cuda_devices=devices,
        backends=backends,
    )


def _run(cmd: list[str], timeout: float = 10.0) -> str | None:
    """stdout of ``cmd`` or None when the tool is missing, fails or hangs."""
    if shutil.which(cmd[0]) is None:
        return None
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def cpu_model(cpuinfo: str | None = None) -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (else ``platform.processor()``)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    m = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
    return m.group(1).strip() if m else (platform.processor() or platform.machine())


def memory_bytes(meminfo: str | None = None) -> int | None:
    """Total RAM in bytes from ``/proc/meminfo`` (``MemTotal``), or None where unreadable."""
    if meminfo is None:
        try:
            meminfo = Path("/proc/meminfo").read_text()
        except OSError:
            return None
    m = re.search(r"^MemTotal:\s*(\d+)\s*kB", meminfo, re.MULTILINE)
    return int(m.group(1)) * 1024 if m else None


def gpu_topology() -> str | None:
    """The text of ``nvidia-smi topo -m`` (GPU interconnect matrix), or None without it."""
    out = _run(["nvidia-smi", "topo", "-m"])
    return out.rstrip() if out else None


def parse_pcie_query(text: str) -> list[dict[str, object]]:
    """Rows of ``nvidia-smi --query-gpu=index,pci.bus_id,pcie.link.gen.current,
    pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max --format=csv,noheader``."""
    out: list[dict[str, object]] = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 6:
            continue
        def num(c: str) -> int | None:
            return int(c) if c.isdigit() else None
        out.append({"gpu": num(cells[0]), "bus_id": cells[1], "gen": num(cells[2]),
                    "gen_max": num(cells[3]), "width": num(cells[4]), "width_max": num(cells[5]),
                    "source": "nvidia-smi"})
    return out


def _sysfs_links(root: Path = Path("/sys/bus/pci/devices")) -> list[dict[str, object]]:
    """PCIe links of NVIDIA display/3D controllers (vendor 0x10de, class 0x03xxxx) from sysfs."""
    out: list[dict[str, object]] = []
    try:
        devices = sorted(root.iterdir())
    except OSError:
        return out
    for dev in devices:
        try:
            if (dev / "vendor").read_text().strip() != "0x10de" or \
                    not (dev / "class").read_text().strip().startswith("0x03"):
                continue
            speed = (dev / "current_link_speed").read_text().strip()
            width = (dev / "current_link_width").read_text().strip()
        except OSError:
            continue
        gts = re.match(r"([\d.]+)", speed)
        gen = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}.get(float(gts.group(1))) \
            if gts else None
        out.append({"gpu": None, "bus_id": dev.name, "gen": gen,
                    "width": int(width) if width.isdigit() else None, "speed": speed,
                    "source": "sysfs"})
    return out


def pcie_links() -> list[dict[str, object]]:
    """Current PCIe link generation and width per GPU (``nvidia-smi``, else sysfs); [] if none."""
    text = _run(["nvidia-smi", "--query-gpu=index,pci.bus_id,pcie.link.gen.current,"
                 "pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max",
                 "--format=csv,noheader"])
    rows = parse_pcie_query(text) if text else []
    return rows or _sysfs_links()


def gpu_count() -> int:
    """CUDA devices torch sees here (0 without CUDA): the count every placement decision
    (:mod:`distlab.devices`) takes."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def nccl_version() -> str | None:
    """The NCCL version torch was built with (``"2.21.5"``), or None in a build without NCCL."""

    try:
        v = torch.cuda.nccl.version()
    except Exception:  # CPU wheels raise (no _nccl module) or lack the attribute
        return None
    return ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)


def machine_facts() -> dict[str, object]:
    """Everything the profile's env part stores, as JSON-ready values (bytes, strings, None).

    Keys: ``cpu_model``, ``cpu_cores``, ``memory_bytes``, ``python``, ``torch``, ``cuda_runtime``
    (None on CPU builds), ``nccl`` (None without NCCL), ``driver`` (``nvidia-smi`` driver version or
    None), ``gpus`` (list of ``{index, name, memory_bytes, capability}``), ``gpu_topology`` (text
    of ``nvidia-smi topo -m`` or None), ``pcie_links`` (list), ``backends``
    (``{name: {usable, why}}``) and ``notes`` (one line per fact that could not be read and why).
    """

    rep = environment_report()
    notes: list[str] = []
    if not rep.cuda_devices:
        notes.append("no GPU: torch sees no CUDA device "
                     f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'no'})")
    topo = gpu_topology()
    if topo is None:
        notes.append("GPU interconnect: nvidia-smi not found or failed (no `nvidia-smi topo -m`)")
    links = pcie_links()
    if not links:
        notes.append("PCIe link: no NVIDIA GPU in nvidia-smi or /sys/bus/pci")
    driver = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    return {
        "cpu_model": cpu_model(),
        "cpu_cores": rep.cpu_cores,
        "memory_bytes": memory_bytes(),
        "python": rep.python,
        "torch": rep.torch_version,
        "cuda_runtime": torch.version.cuda,
        "nccl": nccl_version(),
        "driver": driver.splitlines()[0].strip() if driver else None,
        "gpus": [{"index": d.index, "name": d.name, "memory_bytes": d.total_memory_bytes,
                  "capability": f"{d.capability[0]}.{d.capability[1]}"} for d in rep.cuda_devices],
        "gpu_topology": topo,
        "pcie_links": links,
        "backends": {k: {"usable": ok, "why": why} for k, (ok, why) in rep.backends.items()},
        "notes": notes,
    }
