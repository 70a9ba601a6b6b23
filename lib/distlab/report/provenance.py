"""Provenance attached to every measured result: where, when, with what, by which command."""

from __future__ import annotations

import datetime
import os
import platform
import socket
import sys
from pathlib import Path
from typing import Any

import torch

from distlab.envinfo import cpus_allowed

__all__ = ["command_line", "provenance"]


def provenance(*, backend: str | None = None, world_size: int | None = None,
               device: str | None = None, **extra: Any) -> dict[str, Any]:
    """A dict with host, OS, Python, torch, CPU cores (and those this process may use), CUDA
    driver/devices, date (UTC ISO) and command."""

    cuda: dict[str, Any] = {"available": torch.cuda.is_available()}
    if torch.cuda.is_available():
        cuda["devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        cuda["runtime"] = torch.version.cuda
        try:
            cuda["driver"] = torch.cuda.driver_version() if hasattr(torch.cuda, "driver_version") \
                else None
        except Exception:  # pragma: no cover - depends on the driver
            cuda["driver"] = None
    if device is None:
        cpu = platform.processor() or platform.machine()
        device = cuda["devices"][0] if cuda.get("devices") else f"cpu ({cpu})"
    out: dict[str, Any] = {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_cores": os.cpu_count(),
        "cpus_allowed": cpus_allowed(),
        "cuda": cuda,
        "device": device,
        "backend": backend,
        "world_size": world_size,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command_line(),
    }
    out.update(extra)
    return out


def command_line(argv: list[str] | None = None) -> str:
    """The command that is running, as a user would retype it.

    ``python -m distlab.profile --quick`` shows up in ``sys.argv`` as the path of
    ``distlab/profile/__main__.py``; a script inside the distlab package is written back as
    ``-m distlab.<module>`` so the provenance names the command, not this checkout's path.
    """
    args = list(sys.argv if argv is None else argv)
    if args and args[0].endswith(".py"):
        package_root = Path(__file__).resolve().parent.parent  # lib/distlab
        try:
            rel = Path(args[0]).resolve().relative_to(package_root.parent)
        except ValueError:
            rel = None
        if rel is not None and rel.parts and rel.parts[0] == "distlab":
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__main__":
                parts.pop()
            args = ["-m", ".".join(parts), *args[1:]]
    return " ".join([Path(sys.executable).name, *args])
