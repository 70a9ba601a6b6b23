"""The refit judgement as text: its column sets, its two tables and the lines above them.

:func:`summary_tables` gives the rows of :func:`~distlab.judge.refit_summary.summary_rows` under
:data:`NOW_COLUMNS` (the model as it is, with the rows' noise) and :data:`BEFORE_COLUMNS` (the
predictions stored in the profiles beside it); :data:`SUMMARY_COLUMNS` is every column in one
table. :func:`summary_head` says once what every row shares. Printed by
:func:`distlab.report.table.format_table`; the comment lines are at most :data:`PRINT_WIDTH`
characters.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Sequence

from distlab.judge.refit import (
    TARGET_ALGORITHMS,
    TARGET_MEDIAN_PCT,
    TARGET_MIN_BYTES,
    TARGET_P90_PCT,
    RefitRun,
)
from distlab.judge.refit_summary import calibration_source, summary_rows
from distlab.report.table import Column, Table, format_table

__all__ = ["BEFORE_COLUMNS", "NOW_COLUMNS", "PRINT_WIDTH", "SUMMARY_COLUMNS", "summary_head",
           "summary_table", "summary_tables"]

SUMMARY_COLUMNS = (
    Column("measured on", "profile"), Column("calibrated on", "calibrated_on"),
    Column("backend", "backend"), Column("ws", "world_size"), Column("statistic", "statistic"),
    Column("n before", "before_n"), Column("median%", "before_median", ".1f"),
    Column("p90%", "before_p90", ".1f"), Column("max%", "before_max", ".1f"),
    Column("n after", "after_n"), Column("median%", "after_median", ".1f"),
    Column("p90%", "after_p90", ".1f"), Column("max%", "after_max", ".1f"),
    Column("target", "target"), Column("noise median%", "noise_median", ".1f"),
    Column("noise p90%", "noise_p90", ".1f"), Column("in noise", "within_noise"))
"""Every column of :func:`~distlab.judge.refit_summary.summary_rows` in one table (wider than a
terminal: the command prints :data:`NOW_COLUMNS` and :data:`BEFORE_COLUMNS` instead)."""

NOW_COLUMNS = (
    Column("profile", "profile"), Column("ws", "world_size"), Column("statistic", "statistic"),
    Column("n", "after_n"), Column("median%", "after_median", ".1f"),
    Column("p90%", "after_p90", ".1f"), Column("max%", "after_max", ".1f"),
    Column("target", "target"), Column("noise med%", "noise_median", ".1f"),
    Column("noise p90%", "noise_p90", ".1f"), Column("in noise", "within_noise"))
"""The printed table of the model as it is: ``|error%|`` after, the target, the rows' noise."""

BEFORE_COLUMNS = (
    Column("profile", "profile"), Column("ws", "world_size"), Column("n", "before_n"),
    Column("median%", "before_median", ".1f"), Column("p90%", "before_p90", ".1f"),
    Column("max%", "before_max", ".1f"), Column("median% now", "after_median", ".1f"),
    Column("p90% now", "after_p90", ".1f"))
"""The printed table of the predictions stored in the profiles, beside this model's."""

PRINT_WIDTH = 110
"""The widest comment line the command prints (characters); the tables of profiles whose
names are at most 31 characters long fit it too."""


def _with_columns(columns: tuple[Column, ...], runs: Sequence[RefitRun]) -> tuple[Column, ...]:
    """``columns`` with "calibrated on" and "backend" after the profile where the runs differ
    in them (otherwise the head lines say them once)."""
    extra = [] if calibration_source(runs) is not None else [
        Column("calibrated on", "calibrated_on")]
    if len({r.backend for r in runs}) > 1:
        extra.append(Column("backend", "backend"))
    return (columns[0], *extra, *columns[1:])


def summary_tables(runs: Sequence[RefitRun], *, min_bytes: int = TARGET_MIN_BYTES,
                   algorithms: Iterable[str] | None = TARGET_ALGORITHMS) -> list[Table]:
    """:func:`~distlab.judge.refit_summary.summary_rows` as the two tables the command prints:
    the model now (:data:`NOW_COLUMNS`) and the stored predictions beside it
    (:data:`BEFORE_COLUMNS`)."""
    rows = summary_rows(runs, min_bytes=min_bytes, algorithms=algorithms)
    return [Table(rows, _with_columns(NOW_COLUMNS, runs),
                  "the model now: |error%| of the judged rows; noise med% / p90%: how far a "
                  "row's value could land on a re-run (90% bootstrap half-width); in noise: "
                  "predictions inside it"),
            Table(rows, _with_columns(BEFORE_COLUMNS, runs),
                  "before: the predictions stored in each profile when it was measured "
                  "(builtin had none), beside the model now")]


def summary_table(runs: Sequence[RefitRun], *, min_bytes: int = TARGET_MIN_BYTES,
                  algorithms: Iterable[str] | None = TARGET_ALGORITHMS) -> str:
    """The text of :func:`summary_tables` (titles wrapped to :data:`PRINT_WIDTH`), one blank
    line between the tables."""
    parts = []
    for table in summary_tables(runs, min_bytes=min_bytes, algorithms=algorithms):
        parts.append("\n".join([*_comment(table.title), format_table(table.rows,
                                                                       table.columns)]))
    return "\n\n".join(parts)


def _comment(text: str) -> list[str]:
    """``text`` as ``# `` lines of at most :data:`PRINT_WIDTH` characters."""
    return textwrap.wrap(text, PRINT_WIDTH, initial_indent="# ", subsequent_indent="#   ",
                         break_on_hyphens=False, break_long_words=False)


def summary_head(runs: Sequence[RefitRun], *, min_bytes: int, algorithms: Sequence[str],
                 statistic: str, constant: bool) -> list[str]:
    """The comment lines above the tables: which rows are judged, the target, the statistic
    asked for, the model, and where the calibrations came from (once, when every row shares
    it) and the backend (when every run has the same)."""
    source = calibration_source(runs)
    backends = list(dict.fromkeys(r.backend for r in runs))
    where = []
    if source is not None:
        given = "" if source == "each profile's own" else " (--calibration-from), for every profile"
        where.append(f"calibrated on: {source}{given}")
    if len(backends) == 1:
        where.append(f"backend: {backends[0]}")
    return [*_comment(f"{'constant' if constant else 'per-size'} model; judged: |error%| of "
                      f"rows >= {min_bytes} B of {', '.join(algorithms)}"),
            *_comment(f"target: median <= {TARGET_MEDIAN_PCT:g}%, p90 <= {TARGET_P90_PCT:g}%; "
                      "each run is judged by the statistic of its rounds (asked: "
                      f"{statistic})"),
            *(_comment("; ".join(where)) if where else [])]
