"""Transfer lab: disk -> pageable -> pinned -> GPU copies, measured and modelled.

Modules: :mod:`~distlab.transfers.adapter` (the device-adapter interface), ``host`` (CPU-only),
``cuda`` (thin CUDA), ``paths`` (what is measured), ``sweep`` (sizes x paths -> rows),
``model`` (fit, bounds, link presets), ``prefetch`` (double-buffered prefetcher on a Timeline).
"""

from distlab.transfers.adapter import (MEMORY_KINDS, Buffer, DeviceAdapter, Unavailable,
                                       default_adapter)
from distlab.transfers.host import HostAdapter
from distlab.transfers.model import LINKS, Fit, chain_bound, fit_line, overlap_bounds
from distlab.transfers.sweep import Row, fit_rows, pin_rows, sweep

__all__ = ["MEMORY_KINDS", "Buffer", "DeviceAdapter", "Unavailable", "default_adapter",
           "HostAdapter", "LINKS", "Fit", "chain_bound", "fit_line", "overlap_bounds", "Row",
           "fit_rows", "pin_rows", "sweep"]
