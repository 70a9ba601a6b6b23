"""The measured paths: copies between memory kinds, disk reads (cold and warm), pinning cost.

Each path is a row ``(path, memory)``: ``h2h``/pageable, ``pageable_to_pinned``/pinned,
``h2d`` and ``d2h`` for pageable and pinned, ``d2d``/device, ``disk_read_cold`` and
``disk_read_warm`` (into pageable memory) and the reference ``numpy_copyto``/pageable (a plain
``numpy.copyto`` timed the same way, to show the harness adds nothing). Units: bytes, seconds.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import torch

from distlab._checks import check_choice, check_int, check_str
from distlab.transfers.adapter import DeviceAdapter

__all__ = ["COPY_PATHS", "ROW_KINDS", "DISK_PATHS", "PIN_PATHS", "disk_read_seconds",
           "drop_reason", "copyto_seconds", "pin_cost_seconds", "fs_type"]

# (path, memory) -> (source kind, destination kind)
COPY_PATHS: dict[tuple[str, str], tuple[str, str]] = {
    ("h2h", "pageable"): ("pageable", "pageable"),
    ("pageable_to_pinned", "pinned"): ("pageable", "pinned"),
    ("h2d", "pageable"): ("pageable", "device"),
    ("h2d", "pinned"): ("pinned", "device"),
    ("d2h", "pageable"): ("device", "pageable"),
    ("d2h", "pinned"): ("device", "pinned"),
    ("d2d", "device"): ("device", "device"),
}
DISK_PATHS = ("disk_read_cold", "disk_read_warm")
PIN_PATHS = ("pin_memory", "pinned_caching_alloc", "cuda_host_register")
# every (path, memory) row the sweep can produce, in table order
ROW_KINDS: list[tuple[str, str]] = ([(p, "pageable") for p in DISK_PATHS]
                                    + [("numpy_copyto", "pageable")] + list(COPY_PATHS))


def fs_type(path: str | os.PathLike[str]) -> str:
    """Filesystem type of the mount holding ``path`` (from ``/proc/mounts``), or ``"unknown"``."""
    target, best, kind = os.path.realpath(path), "", "unknown"
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) > 2 and target.startswith(parts[1]) and len(parts[1]) > len(best):
                best, kind = parts[1], parts[2]
    except OSError:
        pass
    return kind


def drop_reason(directory: str | os.PathLike[str]) -> str | None:
    """Why a cold read cannot be measured in ``directory`` (``None`` if it can)."""
    if not hasattr(os, "posix_fadvise"):
        return "os.posix_fadvise is not available on this platform"
    kind = fs_type(directory)
    if kind in ("tmpfs", "ramfs"):
        return f"{directory} is on {kind}: its pages live in memory and cannot be dropped"
    return None


def disk_read_seconds(path: Path, dst: np.ndarray, count: int, *, cold: bool) -> list[float]:
    """Seconds per full read of file ``path`` into ``dst`` (uint8, file-sized). Cold: before
    each read the file is fsynced and its pages dropped with ``POSIX_FADV_DONTNEED``."""
    out = []
    view = memoryview(dst).cast("B")
    for _ in range(count):
        fd = os.open(path, os.O_RDONLY)
        try:
            if cold:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            t0 = time.perf_counter()
            got = 0
            while got < len(view):
                n = os.readv(fd, [view[got:]])
                if n == 0:
                    raise EOFError(f"{path} is shorter than {len(view)} bytes")
                got += n
            out.append(time.perf_counter() - t0)
        finally:
            os.close(fd)
    return out


def copyto_seconds(dst: np.ndarray, src: np.ndarray, count: int) -> list[float]:
    """Seconds per plain ``numpy.copyto(dst, src)``, timed per copy like the adapter's copies."""
    out = []
    for _ in range(count):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        out.append(time.perf_counter() - t0)
    return out


def pin_cost_seconds(adapter: DeviceAdapter, method: str, nbytes: int) -> float:
    """Seconds to obtain ``nbytes`` of pinned memory by ``method`` (one of :data:`PIN_PATHS`):
    ``pin_memory()`` of a pageable tensor, a (warm) allocation from torch's pinned caching
    allocator, or ``cudaHostRegister`` of existing pageable memory. Raises ``RuntimeError``
    with the reason when the method is unavailable."""
    check_choice("method", check_str("method", method), PIN_PATHS)
    nbytes = check_int("nbytes", nbytes, minimum=1)
    reason = adapter.unavailable("pinned")
    if reason:
        raise RuntimeError(reason)
    src = torch.empty(nbytes, dtype=torch.uint8)
    if method == "pin_memory":
        t0 = time.perf_counter()
        src.pin_memory()
        return time.perf_counter() - t0
    if method == "pinned_caching_alloc":
        del_me = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        del del_me  # returned to the cache: the next request of this size is a cache hit
        t0 = time.perf_counter()
        torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        return time.perf_counter() - t0
    if method == "cuda_host_register":
        cudart = torch.cuda.cudart()
        if not hasattr(cudart, "cudaHostRegister"):
            raise RuntimeError("torch.cuda.cudart() has no cudaHostRegister in this build")
        t0 = time.perf_counter()
        err = cudart.cudaHostRegister(src.data_ptr(), nbytes, 0)
        elapsed = time.perf_counter() - t0
        cudart.cudaHostUnregister(src.data_ptr())
        if int(err) != 0:
            raise RuntimeError(f"cudaHostRegister returned error {int(err)}")
        return elapsed
    raise ValueError(f"method must be one of {PIN_PATHS}, got {method!r}")

