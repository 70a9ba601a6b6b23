"""The AMD boxes and NICs the RCCL model knows (:mod:`distlab.rccl.boxes`), each constant with
its source, and how the published tables judge the model on each: what ``python -m distlab.rccl
--boxes`` and ``python -m distlab.judge rccl --boxes`` print."""

from __future__ import annotations

import textwrap
from os import PathLike
from typing import Any

from distlab.evidence.rccl.judged import judge, published_tables
from distlab.rccl.boxes import AMD_BOXES, AMD_NICS, NOT_PRICED
from distlab.rccl.execution import NIC_GBPS
from distlab.report.jsonfile import write_json
from distlab.report.table import Column, format_table
from distlab.vocabulary import ErrorSummary

__all__ = ["box_lines", "box_rows", "boxes_json", "boxes_report", "nic_rows"]

BOX_COLUMNS = (
    Column("box", "key", align="<"), Column("GPU", "gpu", align="<"),
    Column("arch", "arch", align="<"), Column("links", "links"),
    Column("link GB/s", "link_gbps", ".1f"), Column("RCCL GB/s", "rccl_link_gbps", ".1f"),
    Column("priced", "priced", align="<"), Column("tables", "tables"),
    Column("pts", "points"), Column("med %", "median_pct", ".1f", missing="-"),
    Column("p90 %", "p90_pct", ".1f", missing="-"))


NIC_COLUMNS = (
    Column("NIC", "name", align="<"), Column("Gb/s", "gbit", ".0f"),
    Column("GB/s", "gbps", ".1f"), Column("priced at", "priced_gbps", ".1f"),
    Column("published with", "seen_with", align="<"), Column("tables", "tables"))


def _judged_by_gpu() -> dict[str, list[tuple[float, ...]]]:
    """Per GPU, the priced points of every judged published table (all splits)."""
    gpu_of = {t["id"]: t["gpu"] for t in published_tables()}
    out: dict[str, list[tuple[float, ...]]] = {}
    for j in judge():
        out.setdefault(gpu_of[j.id], []).extend(j.rows)
    return out


def box_rows() -> list[dict[str, Any]]:
    """One row per box: its constants, and the published tables of its GPU the model priced
    (points >= 64 KiB, median and p90 of ``|error|``, all splits together; ``python -m
    distlab.rccl --judge`` splits them)."""
    judged = _judged_by_gpu()
    tables = published_tables()
    rows = []
    for b in AMD_BOXES:
        pts = judged.get(b.gpu, [])
        summary = ErrorSummary.of(p[3] for p in pts) if pts else None
        rows.append({"key": b.key, "gpu": b.gpu, "arch": b.arch, "links": b.links,
                     "link_gbps": b.link_gbps, "rccl_link_gbps": b.rccl_link_gbps,
                     "priced": (b.priced_where or "yes") if b.priced else "no",
                     "tables": sum(1 for t in tables if t["gpu"] == b.gpu),
                     "points": len(pts),
                     "median_pct": summary.median if summary else None,
                     "p90_pct": summary.p90 if summary else None, "source": b.source})
    return rows


def _nic_of_table(t: dict[str, Any]) -> str | None:
    text = str(t.get("nic") or "").lower()
    if "pollara" in text:
        return "pollara"
    if "broadcom" in text or "bnxt" in text:
        return "thor2"
    if "mlx5" in text or "connectx" in text:
        return "cx7"
    return None


def nic_rows() -> list[dict[str, Any]]:
    """One row per NIC: its rate, the rate it is priced at and the published tables (of
    several nodes) that ran on it."""
    tables = published_tables()
    return [{"key": n.key, "name": n.name, "gbit": n.gbit, "gbps": n.gbps,
             "priced_gbps": NIC_GBPS, "seen_with": n.seen_with,
             "tables": sum(1 for t in tables if t["nodes"] > 1 and _nic_of_table(t) == n.key),
             "source": n.source} for n in AMD_NICS]


def box_lines(width: int = 100) -> list[str]:
    """What ``--boxes`` prints: the boxes, the NICs, every constant's source, what is not
    priced."""

    def wrapped(head: str, text: str) -> list[str]:
        return textwrap.wrap(f"{head}: {text}", width, initial_indent="  ",
                             subsequent_indent="      ")

    lines = ["# AMD boxes: 8 GPUs, xGMI fully connected (one link to each peer); link GB/s: one",
             "# link's speed each way in AMD's figures; RCCL GB/s: what RCCL's topology credits",
             "# it; tables: published rccl-tests allreduce tables of the GPU; med/p90: |error|",
             "# of the model over their priced sizes >= 64 KiB (--judge splits them)",
             *format_table(box_rows(), BOX_COLUMNS).splitlines(),
             "# NICs (one per GPU across nodes); tables: published multi-node tables on it",
             *format_table(nic_rows(), NIC_COLUMNS).splitlines(),
             "# where each constant comes from"]
    for b in AMD_BOXES:
        lines += wrapped(f"{b.key} ({b.gpu}, {b.arch})", b.source)
    for n in AMD_NICS:
        lines += wrapped(n.name, n.source)
    lines.append("# what the RCCL model cannot price")
    lines += [w for item in NOT_PRICED for w in textwrap.wrap(
        item, width, initial_indent="  - ", subsequent_indent="    ")]
    return lines


def boxes_json() -> dict[str, Any]:
    """The boxes and NICs as ``--boxes --json`` writes them, with what is not priced."""
    return {"boxes": box_rows(), "nics": nic_rows(), "not_priced": list(NOT_PRICED)}


def boxes_report(out: str | PathLike[str] | None) -> int:
    """Print the boxes and NICs with their sources; with ``out``, also their JSON. What
    ``--boxes`` and ``python -m distlab.judge rccl --boxes`` run."""
    print("\n".join(box_lines()))
    if out is not None:
        write_json(out, boxes_json())
    return 0
