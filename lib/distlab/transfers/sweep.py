"""Size sweep over the selected paths: warm-up, timed repeats, median, content check, fit.

Every row is ``{path, memory, nbytes, time_us, gbps, model_gbps, wrong, skipped, us_per_mib}``
(``us_per_mib`` only for pin-cost rows, which are times, not bandwidths); a row that
cannot be measured here has ``time_us``/``gbps``/``wrong`` ``None`` and ``skipped`` = the reason.
GB/s = 1e9 B/s; ``time_us`` is the median seconds per copy x 1e6.
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from distlab.transfers.adapter import DeviceAdapter, Unavailable, count_wrong, pattern
from distlab.transfers.copy_model import Fit, fit_copy_times
from distlab.transfers.paths import (
    COPY_PATHS,
    PIN_PATHS,
    ROW_KINDS,
    copyto_seconds,
    disk_read_seconds,
    drop_reason,
    pin_cost_seconds,
)
from distlab.vocabulary import gb_per_s

__all__ = ["Row", "sweep", "fit_rows", "pin_rows", "FIT_MIN_BYTES"]

FIT_MIN_BYTES = 64 * 1024   # the model-error target applies at sizes >= 64 KiB


@dataclass
class Row:
    """One measured (or skipped) row; see the module docstring."""

    path: str
    memory: str
    nbytes: int
    time_us: float | None = None
    gbps: float | None = None
    model_gbps: float | None = None
    wrong: int | None = None
    skipped: str | None = None
    us_per_mib: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _row(path: str, memory: str, nbytes: int, seconds: list[float], wrong: int) -> Row:
    s = statistics.median(seconds)
    return Row(path, memory, nbytes, s * 1e6, gb_per_s(nbytes, s), None, wrong)


def _measure(adapter: DeviceAdapter, path: str, memory: str, nbytes: int, repeats: int,
             warmup: int, iters: int, workdir: Path) -> Row:
    expected = pattern(nbytes, seed=nbytes % 13)
    if path in ("disk_read_cold", "disk_read_warm"):
        cold = path == "disk_read_cold"
        reason = drop_reason(workdir) if cold else None
        if reason:
            return Row(path, memory, nbytes, skipped=reason)
        f = workdir / f"transfers_{nbytes}.bin"
        f.write_bytes(expected.numpy().tobytes())
        dst = adapter.allocate("pageable", nbytes)
        disk_read_seconds(f, dst.data.numpy(), warmup, cold=cold)
        secs = disk_read_seconds(f, dst.data.numpy(), repeats, cold=cold)
        f.unlink()
        return _row(path, memory, nbytes, secs, count_wrong(dst, expected))
    if path == "numpy_copyto":
        src, dst = adapter.allocate("pageable", nbytes), adapter.allocate("pageable", nbytes)
        src.data.copy_(expected)
        copyto_seconds(dst.data.numpy(), src.data.numpy(), warmup)
        secs = copyto_seconds(dst.data.numpy(), src.data.numpy(), repeats * iters)
        return _row(path, memory, nbytes, secs, count_wrong(dst, expected))
    src_kind, dst_kind = COPY_PATHS[(path, memory)]
    try:
        src, dst = adapter.allocate(src_kind, nbytes), adapter.allocate(dst_kind, nbytes)
    except Unavailable as exc:
        return Row(path, memory, nbytes, skipped=str(exc))
    src.data.copy_(expected)
    for _ in range(warmup):
        adapter.copy(dst, src)
    adapter.synchronize()
    secs: list[float] = []
    for _ in range(repeats):
        secs.extend(adapter.time_copies(dst, src, iters))
    adapter.synchronize()
    return _row(path, memory, nbytes, secs, count_wrong(dst, expected))


def sweep(adapter: DeviceAdapter, sizes: Sequence[int],
          kinds: Iterable[tuple[str, str]] = ROW_KINDS, *, repeats: int = 5, warmup: int = 2,
          iters: int = 10, workdir: str | Path | None = None,
          progress: Callable[[], None] | None = None) -> list[Row]:
    """Measure every ``(path, memory)`` in ``kinds`` at every size; then fill ``model_gbps``
    from a per-path fit (:func:`fit_rows`). ``progress`` is called once per row."""
    kinds = list(kinds)
    bad = [k for k in kinds if k not in ROW_KINDS]
    if bad:
        raise ValueError(f"unknown (path, memory) rows {bad}; allowed {ROW_KINDS}")
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(dir=workdir, prefix="distlab_transfers_") as tmp:
        for nbytes in sizes:
            for path, memory in kinds:
                rows.append(_measure(adapter, path, memory, int(nbytes), repeats, warmup,
                                     iters, Path(tmp)))
                if progress:
                    progress()
    fit_rows(rows)
    return rows


def fit_rows(rows: list[Row], min_bytes: int = FIT_MIN_BYTES) -> dict[tuple[str, str], Fit]:
    """Fit ``t = latency + n / bandwidth`` per (path, memory) over the measured rows of at least
    ``min_bytes`` (all rows when fewer than 2 such sizes exist) and set every row's
    ``model_gbps`` from it. Returns the fits."""
    groups: dict[tuple[str, str], list[Row]] = {}
    for r in rows:
        if r.time_us is not None:
            groups.setdefault((r.path, r.memory), []).append(r)
    fits = {}
    for key, group in groups.items():
        if len({r.nbytes for r in group}) < 2:
            continue
        used = [r for r in group if r.nbytes >= min_bytes]
        used = used if len({r.nbytes for r in used}) >= 2 else group
        try:
            fits[key] = fit_copy_times([r.nbytes for r in used], [r.time_us / 1e6 for r in used])
        except ValueError:
            continue
        for r in group:
            r.model_gbps = fits[key].gbps(r.nbytes)
    return fits


def pin_rows(adapter: DeviceAdapter, sizes: Sequence[int], repeats: int = 3) -> list[Row]:
    """Cost of obtaining pinned memory per method and size: a one-off *time* (``time_us``, and
    ``us_per_mib`` microseconds per MiB pinned), never a bandwidth (``gbps`` stays None, so a
    pin cost never enters a GB/s figure or a "best path"); skipped rows say why (no
    accelerator, no ``cudaHostRegister``)."""
    rows = []
    for nbytes in sizes:
        for method in PIN_PATHS:
            try:
                secs = [pin_cost_seconds(adapter, method, int(nbytes)) for _ in range(repeats)]
            except RuntimeError as exc:
                rows.append(Row(method, "pinned", int(nbytes), skipped=str(exc)))
                continue
            median = statistics.median(secs)
            rows.append(Row(method, "pinned", int(nbytes), median * 1e6, None, None, 0, None,
                            median * 1e6 / (int(nbytes) / 2**20)))
    return rows
