"""What this machine offers distributed training: torch, CPU cores, CUDA devices, backends.

The start-here notebook prints :func:`environment_report` before its first live allreduce.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass, field

__all__ = ["CudaDevice", "EnvironmentReport", "environment_report"]


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
                out.append(f"cuda:{d.index:<8} {d.name}, {d.total_memory_bytes / 2**30:.1f} GiB, "
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
    import torch
    import torch.distributed as dist

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
