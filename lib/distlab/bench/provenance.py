"""Provenance attached to every measured result: where, when, with what, by which command."""

from __future__ import annotations

import datetime
import json
import os
import platform
import socket
import sys
from pathlib import Path
from typing import Any

__all__ = ["provenance", "write_json"]


def provenance(*, backend: str | None = None, world_size: int | None = None,
               device: str | None = None, **extra: Any) -> dict[str, Any]:
    """A dict with host, OS, Python, torch, CUDA driver/devices, date (UTC ISO) and command."""
    import torch

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
        device = cuda["devices"][0] if cuda.get("devices") else f"cpu ({platform.processor() or platform.machine()})"
    out: dict[str, Any] = {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_cores": os.cpu_count(),
        "cuda": cuda,
        "device": device,
        "backend": backend,
        "world_size": world_size,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }
    out.update(extra)
    return out


def write_json(path: str | os.PathLike[str], payload: dict[str, Any]) -> Path:
    """Write ``payload`` as indented JSON, creating parent folders; returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(payload, indent=2, sort_keys=False, default=str) + "\n")
    return p
