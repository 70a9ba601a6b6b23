"""NCCL's choice per size on a GPU box, and its measured time, as a table (a report module).

One row per buffer size: NCCL's algorithm and protocol (its estimate's cheapest), channels
launched, chunk bytes, pipeline steps, NCCL's own estimate (us), the predicted measured time
(us), its bus bandwidth (GB/s, nccl-tests' definition) and, for an allreduce, what bounds it
(``host`` or ``gpu``). The model is :mod:`distlab.nccl.execution` (allreduce,
one or several nodes) and :mod:`distlab.nccl.family` (all-gather,
reduce-scatter, broadcast on one node, NCCL 2.28.9). Tables are printed by
:func:`distlab.report.table.format_table`, at most 110 columns wide.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

from distlab.nccl import versions
from distlab.nccl.boxes import GPU_BOXES
from distlab.nccl.execution import nccl_execution
from distlab.nccl.multinode import NETWORKS
from distlab.nccl.versions import NcclConstants, resolve_nccl_version
from distlab.report.table import Column, format_table
from distlab.vocabulary import collective_name, size_label

__all__ = ["CHOICE_COLUMNS", "DEFAULT_SIZES", "FAMILY_COLUMNS", "choice_json", "choice_lines",
           "choice_rows"]

DEFAULT_SIZES = [1 << k for k in range(16, 34, 2)]
"""64 KiB to 4 GiB, every factor 4."""


FAMILY_COLUMNS = (
    Column("size", "size", width=8), Column("algo", "algorithm", width=9),
    Column("proto", "protocol", width=6), Column("ch", "channels", width=3),
    Column("chunk", "chunk", width=8), Column("steps", "steps", width=6),
    Column("estimate us", "estimate_us", ".1f", width=11),
    Column("predicted us", "predicted_us", ".1f", width=12),
    Column("busbw GB/s", "busbw_gbps", ".1f", width=10))
"""The columns of another collective's table (sizes and chunks as ``64 KiB``, times in us)."""

CHOICE_COLUMNS = (*FAMILY_COLUMNS, Column("bound", "bound", width=5))
"""The columns of the allreduce table: :data:`FAMILY_COLUMNS` and what bounds the time."""


def _executions(box: str, world_size: int, sizes: Sequence[int], harness: str, version: Any,
                nodes: int, network: str | None) -> list[Any]:
    return nccl_execution(box, world_size, sizes, harness=harness, nccl_version=version,
                          nodes=nodes, network=network if nodes > 1 else None)


def choice_rows(box: str, world_size: int, sizes: Sequence[int], harness: str,
                nccl_version: str | NcclConstants | None = None, *, nodes: int = 1,
                network: str | None = None) -> list[dict[str, Any]]:
    """One dict per size of the allreduce on ``nodes`` x ``box`` (``world_size`` GPUs in all,
    ``network`` between nodes): the terms of
    :class:`~distlab.nccl.execution.Execution` (``nbytes``, ``algorithm``,
    ``protocol``, ``channels``, ``chunk_bytes``, ``steps``, ``estimate_us``, ``predicted_us``,
    ``busbw_gbps`` in GB/s, ``bound``)."""
    return [{"nbytes": e.nbytes, "algorithm": e.algorithm, "protocol": e.protocol,
             "channels": e.channels, "chunk_bytes": e.chunk_bytes, "steps": e.steps,
             "estimate_us": e.estimate_us, "predicted_us": e.seconds * 1e6,
             "busbw_gbps": e.busbw_gbps, "bound": e.bound}
            for e in _executions(box, world_size, sizes, harness, nccl_version, nodes, network)]


def _shown(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with ``size`` and ``chunk`` as the table shows them (``64 KiB``)."""
    return [{**r, "size": size_label(r["nbytes"]), "chunk": size_label(r["chunk_bytes"])}
            for r in rows]


def choice_lines(box: str, world_size: int, sizes: Sequence[int], harness: str,
                 nccl_version: str | NcclConstants | None = None, *, nodes: int = 1,
                 network: str | None = None, collective: str = "all_reduce") -> list[str]:
    """The per-size table as text lines (at most 110 columns): a ``#`` line naming the call,
    then :data:`CHOICE_COLUMNS` (:data:`FAMILY_COLUMNS` for another collective)."""
    version = versions.nccl_constants(nccl_version)
    collective = collective_name(collective)
    if collective != "all_reduce":
        return _family_lines(box, world_size, sizes, harness, collective)
    where = f"{nodes} x {box} over {network}" if nodes > 1 else GPU_BOXES[box].name
    rows = choice_rows(box, world_size, sizes, harness, version, nodes=nodes, network=network)
    head = [f"# {where}, {world_size} GPUs, NCCL {version.release}, {harness}: NCCL's choice, "
            "predicted time as measured"]
    if nodes > 1 and network is not None:
        head += _network_note(network, version)
    return [*head, *format_table(_shown(rows), CHOICE_COLUMNS).splitlines()]


def _network_note(network: str, version: NcclConstants) -> list[str]:
    """One ``#`` line on how NCCL holds ``network`` where that differs from its ports: merged
    devices, a plugin's latency (NCCL's estimate) and the transport's hop (the prediction)."""
    net = NETWORKS[network]
    devices, gbps = net.nccl_devices(version)
    parts = []
    if devices != net.rails:
        parts.append(f"NCCL sees {devices} devices of {gbps:g} GB/s ({net.rails} ports)")
    if net.plugin_latency_us:
        parts.append(f"its estimate adds the plugin's {net.plugin_latency_us:g} us a network "
                     "hop (twice for Simple)")
    if net.hop_floor_us:
        parts.append(f"the prediction takes the transport's {net.hop_floor_us:g} us hop")
    if net.nccl_protocols:
        parts.append(f"the plugin sets NCCL_PROTO={','.join(net.nccl_protocols).lower()}")
    if net.min_stripe_bytes and net.merged_by == "plugin":
        parts.append(f"a message under {net.min_stripe_bytes >> 10} KiB crosses on one of a "
                     f"device's {net.ports_per_device} ports")
    if net.nvls_chunk_bytes:
        parts.append(f"NVLS-Tree chunks start at {net.nvls_chunk_bytes >> 10} KiB (the plugin's "
                     "NCCL_NVLSTREE_MAX_CHUNKSIZE)")
    if not parts:
        return []
    return textwrap.wrap("; ".join(parts), 98, initial_indent="# ", subsequent_indent="# ")


def choice_json(box: str, world_size: int, sizes: Sequence[int], harness: str,
                nccl_version: str | None = None, *, nodes: int = 1,
                network: str | None = None) -> dict[str, Any]:
    """The per-size allreduce table as JSON: the call, ``nccl_version`` (``asked``, ``priced_as``
    and ``note``: one line when the release asked is not one the model holds, else "") and one
    row per size (:func:`choice_rows`)."""
    resolved = resolve_nccl_version(nccl_version)
    rows = choice_rows(box, world_size, sizes, harness, resolved.version, nodes=nodes,
                       network=network)
    return {"box": box, "world_size": world_size, "nodes": nodes, "network": network,
            "harness": harness, "nccl_version": {"asked": resolved.asked,
                                                 "priced_as": resolved.priced_as,
                                                 "note": resolved.note},
            "rows": rows}


def _family_lines(box: str, world_size: int, sizes: Sequence[int], harness: str,
                  collective: str) -> list[str]:
    from distlab.nccl.family import nccl_collective

    rows = [{"nbytes": r.nbytes, "algorithm": r.algorithm, "protocol": r.protocol,
             "channels": r.channels, "chunk_bytes": r.chunk_bytes, "steps": r.steps,
             "estimate_us": r.estimate_us, "predicted_us": r.seconds * 1e6,
             "busbw_gbps": r.busbw_gbps}
            for r in nccl_collective(box, world_size, sizes, collective, harness=harness)]
    return [f"# {box}, {world_size} GPUs, NCCL 2.28.9, {harness}: {collective}, size = the "
            "whole buffer, predicted time as measured",
            *format_table(_shown(rows), FAMILY_COLUMNS).splitlines()]
