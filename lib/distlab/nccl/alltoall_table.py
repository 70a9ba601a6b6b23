"""NCCL's all-to-all per size on a GPU box (one node or across nodes) as nccl-tests'
``alltoall_perf`` prints it: what ``python -m distlab.nccl BOX --collective all_to_all`` prints.

Columns: ``size(B)`` (bytes each rank sends in all), ``count`` (elements per peer, as
``alltoall_perf`` prints it), ``type``, ``time(us)`` (the model's), ``algbw(GB/s)`` and
``busbw(GB/s)`` (nccl-tests' definitions), then what the model laid out: the protocol, the
channels one peer's operation is split over, the batches of 8 operations per channel, and what
bounds the time (``nvlink`` or ``network``). The model is :mod:`distlab.nccl.alltoall`; its
judgement on published tables is ``python -m distlab.judge nccl --alltoall``.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from distlab.nccl.alltoall import alltoall_times, fabric
from distlab.nccl.multinode import NETWORKS
from distlab.report.table import Column, format_table
from distlab.vocabulary import dtype_bytes

__all__ = ["ALLTOALL_COLUMNS", "alltoall_lines"]

ALLTOALL_COLUMNS = (
    Column("size(B)", "nbytes", width=12), Column("count", "count", width=11),
    Column("type", "type", width=6), Column("time(us)", "time_us", ".2f", width=10),
    Column("algbw(GB/s)", "algbw_gbps", ".2f", width=11),
    Column("busbw(GB/s)", "busbw_gbps", ".2f", width=11),
    Column("proto", "protocol", width=6), Column("ch", "op_channels", width=3),
    Column("batches", "batches", width=7), Column("bound", "bound", width=7))
"""nccl-tests' columns (out of place), then the model's layout."""


def alltoall_lines(box: str, world_size: int, sizes: Sequence[int], *, nodes: int = 1,
                   network: str | None = None, dtype: str = "float") -> list[str]:
    """The per-size table as text lines: a ``#`` line naming the call, then
    :data:`ALLTOALL_COLUMNS`. ``network`` (a key of
    :data:`~distlab.nccl.multinode.NETWORKS`) joins ``nodes > 1``; its NIC rate per GPU
    (:meth:`~distlab.nccl.multinode.Network.gbps_per_gpu`) carries the messages to other
    nodes, as :data:`distlab.nccl.library.NCCL` prices an all-to-all."""
    nic = NETWORKS[network].gbps_per_gpu(world_size // nodes) \
        if nodes > 1 and network is not None else 0.0
    f = fabric(box, world_size, nodes=nodes, nic_gbps=nic)
    eltsize = dtype_bytes(dtype) or 1
    rows = [{"nbytes": r.nbytes, "count": r.nbytes // world_size // eltsize, "type": dtype,
             "time_us": r.seconds * 1e6, "algbw_gbps": r.algbw_gbps,
             "busbw_gbps": r.busbw_gbps, "protocol": r.layout.protocol,
             "op_channels": r.layout.op_channels, "batches": r.layout.batches, "bound": r.bound}
            for r in alltoall_times(f, sizes)]
    where = f"{nodes} x {box} over {network} ({nic:g} GB/s of NIC per GPU)" if nodes > 1 \
        else box
    head = (f"{where}, {world_size} GPUs: all_to_all as NCCL runs it (grouped send/recv to the "
            "n-1 peers, PXN across nodes), alltoall_perf's columns, the model's time")
    return [*textwrap.wrap(head, 98, initial_indent="# ", subsequent_indent="# "),
            *format_table(rows, ALLTOALL_COLUMNS).splitlines()]
