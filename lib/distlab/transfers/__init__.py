"""Transfer lab: disk -> pageable -> pinned -> GPU copies, measured and modelled.

Modules: :mod:`~distlab.transfers.adapter` (the device-adapter interface), ``host`` (CPU-only),
``cuda`` (thin CUDA), ``paths`` (what is measured), ``sweep`` (sizes x paths -> rows),
``copy_model`` (fit, bounds; link peaks: :mod:`distlab.links`), ``prefetch`` (double-buffered
prefetcher on a Timeline), ``gpu_topology`` (``nvidia-smi topo -m`` read into GPU pairs and their
paths, NUMA nodes; fake boxes for rehearsal: pure), ``host_to_all_plan`` (which NUMA node each
GPU's host buffer is bound to when every GPU copies at once: pure).

The hop between processes (a batch from a worker process into the trainer): ``hop_paths`` (the
paths and whether each can run here: pure), ``hop_worker`` (the worker process), ``hop`` (the
trainer side: :class:`~distlab.transfers.hop.HopLink`), ``hop_sweep`` (sizes x paths -> rows,
parts, fits), ``hop_model`` (fixed cost or copy), ``shm`` (what a process maps and holds open;
the segments a dead worker left).
"""

from distlab.transfers.adapter import MEMORY_KINDS, Buffer, DeviceAdapter, Unavailable
from distlab.transfers.copy_model import Fit, chain_bound, fit_copy_times, overlap_bounds
from distlab.transfers.default import default_adapter
from distlab.transfers.host import HostAdapter
from distlab.transfers.sweep import Row, fit_rows, pin_rows, sweep

__all__ = ["MEMORY_KINDS", "Buffer", "DeviceAdapter", "Unavailable", "default_adapter",
           "HostAdapter", "Fit", "chain_bound", "fit_copy_times", "overlap_bounds", "Row",
           "fit_rows", "pin_rows", "sweep"]
