"""RCCL's choice and time as printed lines: what ``python -m distlab.rccl`` prints and notebook
14 shows. The judgement on published tables and the boxes' inventory are the model's evidence,
:mod:`distlab.evidence.rccl`."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

from distlab.rccl.execution import RcclTime, one_node_note
from distlab.rccl.tables import GPU_ARCHS, arch_gpus
from distlab.report.table import Column, format_table
from distlab.vocabulary import size_label

__all__ = ["TIME_COLUMNS", "time_lines", "time_row"]

TIME_COLUMNS = (
    Column("size", "size", align="<"), Column("path", "path", align="<"),
    Column("algo", "algorithm", align="<"), Column("proto", "protocol", align="<"),
    Column("RCCL est. us", "estimate_us", ".1f"), Column("model us", "model_us", ".1f"),
    Column("busbw GB/s", "busbw_gbps", ".1f"), Column("note", "why", align="<", missing=""))


def time_row(r: RcclTime) -> dict[str, Any]:
    """One size as a table row (and a JSON record): times in us, bandwidth in GB/s."""
    c = r.choice
    return {"size": size_label(c.nbytes), "bytes": c.nbytes, "path": c.path,
            "algorithm": c.algorithm, "protocol": c.protocol, "estimate_us": c.estimate_us,
            "model_us": None if r.seconds is None else r.seconds * 1e6,
            "seconds": r.seconds, "busbw_gbps": r.busbw_gbps,
            "why": "not priced (below)" if r.why else ""}


_GPUS = {arch: "/".join(arch_gpus(arch)) for arch in set(GPU_ARCHS.values())}


def time_lines(rows: Sequence[RcclTime], nodes: int, release: str,
               arch: str = "gfx942", notes: Sequence[str] = ()) -> list[str]:
    """A title, the table of ``rows``, one line per reason a size is not priced, what a
    one-node time on an architecture the rates were not fitted on rests on, and ``notes`` (the
    command passes :func:`distlab.evidence.rccl.judged.tree_note`: what a priced tree across
    nodes rests on, from the published tables)."""
    head = (f"# RCCL {release} allreduce on {nodes} x 8 {_GPUS.get(arch, arch)} ({arch}), "
            f"{nodes * 8} GPUs")
    said = sorted({r.why for r in rows if r.why})
    if nodes == 1 and one_node_note(arch):
        said.append(one_node_note(arch))
    said += [n for n in notes if n]
    reasons = [line for w in said
               for line in textwrap.wrap(w, 98, initial_indent="# ", subsequent_indent="#   ")]
    return [head, format_table([time_row(r) for r in rows], TIME_COLUMNS), *reasons]
