"""RCCL's choice and time, and the execution model's judgement, as printed lines and JSON: what
``python -m distlab.rccl`` and ``python -m distlab.judge rccl`` print and notebook 14 shows (one
place for all three)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from os import PathLike
from typing import Any

from distlab.rccl.boxes import NOT_PRICED, box_lines, box_rows, nic_rows
from distlab.rccl.execution import RcclTime, judge, one_node_note, tree_note
from distlab.rccl.tables import GPU_ARCHS, arch_gpus
from distlab.report.jsonfile import write_json
from distlab.report.table import Column, format_table
from distlab.vocabulary import size_label

__all__ = ["JUDGE_COLUMNS", "TIME_COLUMNS", "boxes_json", "boxes_report", "judge_json",
           "judge_lines", "judge_report", "judge_rows", "time_lines", "time_row"]

TIME_COLUMNS = (
    Column("size", "size", align="<"), Column("path", "path", align="<"),
    Column("algo", "algorithm", align="<"), Column("proto", "protocol", align="<"),
    Column("RCCL est. us", "estimate_us", ".1f"), Column("model us", "model_us", ".1f"),
    Column("busbw GB/s", "busbw_gbps", ".1f"), Column("note", "why", align="<", missing=""))
JUDGE_COLUMNS = (
    Column("table", "id", align="<"), Column("split", "split", align="<"),
    Column("priced", "priced"), Column("unpriced", "unpriced"),
    Column("median |err|%", "median_pct", ".1f"), Column("p90 |err|%", "p90_pct", ".1f"))


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
               arch: str = "gfx942") -> list[str]:
    """A title, the table of ``rows``, one line per reason a size is not priced, and what a
    one-node time on an architecture the rates were not fitted on rests on."""
    head = (f"# RCCL {release} allreduce on {nodes} x 8 {_GPUS.get(arch, arch)} ({arch}), "
            f"{nodes * 8} GPUs")
    said = sorted({r.why for r in rows if r.why})
    if nodes == 1 and one_node_note(arch):
        said.append(one_node_note(arch))
    if tree := tree_note(rows):
        said.append(tree)
    reasons = [line for w in said
               for line in textwrap.wrap(w, 98, initial_indent="# ", subsequent_indent="#   ")]
    return [head, format_table([time_row(r) for r in rows], TIME_COLUMNS), *reasons]


def judge_rows() -> list[dict[str, Any]]:
    """One row per published table the model prices: its split, the sizes priced and not,
    the median and p90 of |error| (sizes >= 64 KiB)."""
    return [{"id": j.id, "split": j.split, "priced": len(j.rows), "unpriced": len(j.unpriced),
             "median_pct": j.median_pct, "p90_pct": j.p90_pct,
             "tree_left_out": j.tree_left_out} for j in judge()]


def judge_lines(rows: Sequence[dict[str, Any]] | None = None) -> list[str]:
    """The judgement as a title, the table and which tables' tree sizes are judged
    leave-one-out."""
    rows = list(judge_rows() if rows is None else rows)
    left = [r["id"] for r in rows if r.get("tree_left_out")]
    tail = textwrap.wrap(f"{', '.join(left)}: their tree sizes fit the tree across nodes; "
                         "each is judged with it fitted on the others only", 98,
                         initial_indent="# ", subsequent_indent="#   ") if left else []
    return ["# the execution model on published rccl-tests allreduce tables, sizes >= 64 KiB",
            "# error: (measured - model) / model of the out-of-place times",
            format_table(rows, JUDGE_COLUMNS), *tail]


def judge_json(rows: Sequence[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The judgement as ``--judge --json`` writes it: the table rows (:func:`judge_rows`), each
    table's priced points and its unpriced sizes with the reason."""
    judged = judge()
    return {"tables": judge_rows() if rows is None else list(rows),
            "points": {j.id: [list(r) for r in j.rows] for j in judged},
            "unpriced": {j.id: [[n, why] for n, why in zip(j.unpriced, j.unpriced_why,
                                                            strict=True)]
                         for j in judged}}


def boxes_json() -> dict[str, Any]:
    """The boxes and NICs as ``--boxes --json`` writes them, with what is not priced."""
    return {"boxes": box_rows(), "nics": nic_rows(), "not_priced": list(NOT_PRICED)}


def judge_report(out: str | PathLike[str] | None) -> int:
    """Print the execution model on every published table; with ``out``, also its JSON
    (:func:`~distlab.rccl.lines.judge_json`). What ``--judge`` and ``python -m distlab.judge
    rccl --published`` run."""
    rows = judge_rows()
    print("\n".join(judge_lines(rows)))
    if out is not None:
        write_json(out, judge_json(rows))
    return 0


def boxes_report(out: str | PathLike[str] | None) -> int:
    """Print the boxes and NICs with their sources; with ``out``, also their JSON. What
    ``--boxes`` and ``python -m distlab.judge rccl --boxes`` run."""
    print("\n".join(box_lines()))
    if out is not None:
        write_json(out, boxes_json())
    return 0
