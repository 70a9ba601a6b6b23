"""NCCL's measured-time model judged on published tables, as text tables: what
``python -m distlab.nccl --judge`` and ``python -m distlab.judge nccl --published`` print.

- :func:`published_lines`: every published 8-GPU allreduce table, in sample (constants fitted
  on every table) and leave-one-source-out (each source priced with constants fitted on the
  others);
- :func:`multinode_lines`: every published table beyond one 8-GPU box (nodes, GB200 NVLink
  domains; out of sample: nothing is fitted on them);
- :func:`collective_lines`: every published point of another collective or of an allreduce with
  an algorithm switched off, then each published statement of NCCL's choice beside the model's
  (:func:`choice_agreement`); both out of sample.

Errors are of the time, in percent; ``<=20%`` counts the points within 20%. Tables are printed
by :func:`distlab.report.table.format_table`; a table label longer than its column goes on in
indented lines below its row, so no label is cut. Nothing is measured.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from os import PathLike
from typing import Any

from distlab.report.table import Column, format_table
from distlab.vocabulary import collective_name, size_label

__all__ = ["COLLECTIVE_COLUMNS", "ERROR_LINE", "LABEL_WIDTH", "MULTINODE_COLUMNS",
           "PUBLISHED_COLUMNS", "choice_agreement", "collective_lines", "multinode_lines",
           "published_lines"]

ERROR_LINE = ("# error: (published - model) / model time, % (+: the run was slower than the "
              "model); med, p90: of |error|")
"""The error convention (:func:`distlab.vocabulary.error_pct`), printed above each table."""

LABEL_WIDTH = 62
"""The width of the table-label column (characters); longer labels wrap below their row."""

_LABEL = Column("table", "label", width=LABEL_WIDTH, align="<")

PUBLISHED_COLUMNS = (
    _LABEL, Column("n", "n", width=3), Column("in: med", "in_median", width=7),
    Column("p90", "in_p90", width=5), Column("<=20%", "in_within_20", width=5),
    Column("out: med", "out_median", width=8), Column("p90", "out_p90", width=5),
    Column("<=20%", "out_within_20", width=5))
"""In sample (``in``) and leave-one-source-out (``out``): median and p90 of |time error|."""

MULTINODE_COLUMNS = (
    _LABEL, Column("n", "n", width=3), Column("med", "median", width=7),
    Column("p90", "p90", width=5), Column("<=20%", "within_20", width=5))
"""Out of sample: median and p90 of |time error| and the points within 20%."""

COLLECTIVE_COLUMNS = (
    Column("collective", "collective", width=15, align="<"),
    Column("NCCL may use", "allowed", width=13, align="<"), Column("size", "size", width=7),
    Column("ran", "ran", width=5), Column("model", "model", width=12),
    Column("busbw GB/s: published", "busbw_gbps", ".1f", width=21),
    Column("model", "model_busbw_gbps", ".1f", width=6),
    Column("time error", "error", width=10))
"""One published point each: what NCCL ran and what the model runs, bus bandwidths (GB/s) and
the time error."""

_AGREEMENT_COLUMNS = (Column("", "stated", width=34, align="<"),
                      Column("", "sizes", width=22, align="<"),
                      Column("", "made", align="<"))


def _pct(value: float, spec: str) -> str:
    return f"{format(value, spec)}%"


def _labelled(rows: Sequence[dict[str, Any]], columns: Sequence[Column]) -> list[str]:
    """The table of ``rows`` (each with its label's lines as ``label_lines``), the label's
    further lines indented below its row."""
    lines = format_table([{**r, "label": r["label_lines"][0]} for r in rows],
                         columns).splitlines()
    out = [lines[0]]
    for row, line in zip(rows, lines[1:], strict=True):
        out += [line, *(f"  {more}" for more in row["label_lines"][1:])]
    return out


def published_lines(*, write: str | PathLike[str] | None = None,
                    inside: Sequence[Any] | None = None,
                    outside: Sequence[Any] | None = None) -> list[str]:
    """Errors of the measured-time model on every published table, in sample and
    leave-one-source-out (and the constants; refitted first and written to the file ``write``
    names where one is given, never into the installed package).
    ``inside`` / ``outside``: the points already judged in sample / leave-one-source-out
    (:func:`~distlab.evidence.nccl.fit_execution.judge`,
    :func:`~distlab.evidence.nccl.fit_execution.leave_one_source_out`), so a caller
    that holds them does not judge them again; ``None`` judges them here."""
    from distlab.evidence.nccl.fit_execution import (
        CONSTANT_NAMES,
        calibration_points,
        judge,
        leave_one_source_out,
        shipped_constants,
        summarize,
        write_shipped,
    )

    points = calibration_points()
    constants = write_shipped(write) if write is not None else shipped_constants()
    lines = ["# constants (us): " + ", ".join(f"{k} {getattr(constants, k):.3f}"
                                              for k in CONSTANT_NAMES)
             + (f" (refitted, written to {write})" if write is not None else "")]
    if inside is None or write is not None:
        inside = judge(points, constants)
    if outside is None:
        outside = leave_one_source_out(points)
    in_by = {s.label: s for s in summarize(inside)}
    out_by = {s.label: s for s in summarize(outside)}
    rows = [{"label_lines": _label_lines(label), "n": s.n,
             "in_median": _pct(s.median, ".1f"), "in_p90": _pct(s.p90, ".0f"),
             "in_within_20": s.within(20), "out_median": _pct(out_by[label].median, ".1f"),
             "out_p90": _pct(out_by[label].p90, ".0f"),
             "out_within_20": out_by[label].within(20)} for label, s in in_by.items()]
    return lines + [ERROR_LINE] + _labelled(rows, PUBLISHED_COLUMNS)


def _label_lines(label: str, width: int = LABEL_WIDTH) -> list[str]:
    """A table's label in lines of at most ``width`` characters (the rest indented below), so
    no label is cut."""
    return textwrap.wrap(label, width, subsequent_indent="", break_on_hyphens=False) or [""]


def multinode_lines(constants: Any = None) -> list[str]:
    """Errors of the model on every published table beyond one 8-GPU box the project holds
    (``allreduce_multinode``: nodes of 8 GPUs, GB200 racks and hosts; out of sample: no constant
    is fitted on them), one line per table, then all."""
    from distlab.evidence.nccl.fit_execution import (
        judge,
        multinode_points,
        shipped_constants,
        summarize,
    )

    judged = judge(multinode_points(), shipped_constants() if constants is None else constants)
    rows = [{"label_lines": _label_lines(s.label), "n": s.n,
             "median": _pct(s.median, ".1f"), "p90": _pct(s.p90, ".0f"),
             "within_20": s.within(20)} for s in summarize(judged)]
    return ["# beyond one 8-GPU box: nodes, GB200 NVLink domains (judged only, never fitted on)",
            ERROR_LINE, *_labelled(rows, MULTINODE_COLUMNS)]


def collective_lines(constants: Any = None) -> list[str]:
    """The model on every published point of another collective or of an allreduce with an
    algorithm switched off, one line each (out of sample: no constant is fitted on them), then
    each published statement of NCCL's choice beside the model's choice at the same sizes."""
    from distlab.evidence.nccl.fit_execution import (
        collective_points,
        judge_collectives,
        published_choices,
        shipped_constants,
    )

    points = collective_points()
    judged = judge_collectives(points, shipped_constants() if constants is None else constants)
    rows = [{"collective": collective_name(p["collective"]),
             "allowed": "+".join(p["algorithms"]) if p.get("algorithms") else "any",
             "size": size_label(j.nbytes), "ran": p["published_algorithm"],
             "model": f"{j.execution.algorithm}/{j.execution.protocol}",
             "busbw_gbps": float(p["busbw_gbps"]), "model_busbw_gbps": j.execution.busbw_gbps,
             "error": _pct(j.error_pct, "+.1f")} for j, p in zip(judged, points, strict=True)]
    lines = ["# other collectives, and allreduce with an algorithm switched off (judged only, "
             "never fitted on)", ERROR_LINE, *format_table(rows, COLLECTIVE_COLUMNS).splitlines()]
    for c in published_choices():
        lines.append(f"# NCCL's choice as published: {c['system']}, NCCL {c['nccl_version']}")
        agreement = [{"stated": stated, "sizes": sizes, "made": f"model: {made}"}
                     for stated, sizes, made in choice_agreement(c)]
        lines += [f"  {ln}" for ln in
                  format_table(agreement, _AGREEMENT_COLUMNS).splitlines()[1:]]
    return lines


def choice_agreement(stated: dict[str, Any]) -> list[tuple[str, str, str]]:
    """For one published statement of NCCL's choice (``nccl_choice_8gpu``): per stated range,
    ``(stated algorithm/protocol, its sizes, the model's choices there)``, over every power of
    two from 32 KiB to 16 GiB."""
    from distlab.nccl.tuning import nccl_allreduce

    sizes = [1 << k for k in range(15, 35)]
    made = {c.nbytes: f"{c.algorithm}/{c.protocol}" for c in nccl_allreduce(
        stated["preset"], int(stated["world_size"]), sizes, nccl_version=stated["nccl_version"])}
    out = []
    for rule in stated["choices"]:
        lo, hi = int(rule.get("min_nbytes", sizes[0])), int(rule.get("max_nbytes", sizes[-1]))
        inside = [n for n in sizes if lo <= n <= hi]
        out.append((f"{rule['algorithm']}/{rule['protocol']}",
                    f"{size_label(inside[0])} to {size_label(inside[-1])}",
                    ", ".join(sorted({made[n] for n in inside}))))
    return out
