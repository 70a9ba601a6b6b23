"""The model's judgement as text tables (the figures are in :mod:`distlab.viz.refit`).

- :func:`error_by_size_table`: one line per buffer size, one ``error%`` column per algorithm.
- :func:`travel_table`: every profile priced with every profile's calibration (same world size):
  the median and p90 of |error%| over the judged rows, calibrated-on x measured-on.
- :func:`spread_table`: per judged row, how the per-round times spread: the error of its judged
  value, of the fast quarter (25th percentile of rounds) and the share of rounds slower than
  twice the fastest.
- :func:`window_table`: per profile, world size and window length
  (:func:`~distlab.judge.windows.window_summary`): how many windows meet the target.

Every table is printed by :func:`distlab.report.table.format_table`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from distlab.judge.refit import (
    TARGET_ALGORITHMS,
    TARGET_MEDIAN_PCT,
    TARGET_MIN_BYTES,
    TARGET_P90_PCT,
    RefitRun,
    algorithms_in,
    error_stats,
    profile_cpus,
    refit_profile,
)
from distlab.profile.load import load_profile
from distlab.report.table import Column, format_table
from distlab.vocabulary import error_pct

__all__ = ["SPREAD_COLUMNS", "TRAVEL_COLUMNS", "WINDOW_COLUMNS", "error_by_size_table", "run_line",
           "spread_rows", "spread_table", "travel_rows", "travel_table", "window_table"]

PathLike = str | os.PathLike[str]


def error_by_size_table(run: RefitRun, *, algorithms: Iterable[str] | None = None) -> str:
    """One line per buffer size, one ``error%`` column per algorithm (``-``: no row)."""
    algos = algorithms_in([run], algorithms)
    by = {(r["nbytes"], r["algorithm"]): r.get("error_pct") for r in run.rows}
    rows = [{"nbytes": n, **{a: by.get((n, a)) for a in algos}}
            for n in sorted({r["nbytes"] for r in run.rows})]
    cols = [Column("size(B)", "nbytes")] + [Column(a[:12], a, "+.0f") for a in algos]
    head = f"{run_line(run)}\n# error% = (measured - predicted) / predicted"
    return head + "\n" + format_table(rows, cols)


def run_line(run: RefitRun) -> str:
    """A ``#`` line naming ``run``: its profile, backend and world size, the calibration that
    priced it (``own calibration`` or ``calibrated on NAME``) and the statistic it is judged
    by; under 110 characters for profile names of up to 32."""
    source = ("own calibration" if run.calibrated_on == run.profile
              else f"calibrated on {run.calibrated_on}")
    return (f"# {run.profile}, {run.backend} ws {run.world_size}, {source}, judged by the "
            f"{run.statistic}")


TRAVEL_COLUMNS = (Column("measured on", "measured"), Column("calibrated on", "calibrated"),
                  Column("ws", "world_size"), Column("n", "n"),
                  Column("median%", "median", ".1f"), Column("p90%", "p90", ".1f"),
                  Column("max%", "max", ".1f"))


def travel_rows(profiles: Sequence[PathLike], *, min_bytes: int = TARGET_MIN_BYTES,
                algorithms: Iterable[str] | None = TARGET_ALGORITHMS) -> list[dict[str, Any]]:
    """Every profile's rows priced with every profile's calibration of the same backend and
    world size: one dict per (measured, calibrated, world size) with ``n``, ``median``, ``p90``
    and ``max`` of |error%| over the judged rows, and the CPUs each profile's ranks could run
    on (``measured_cpus``, ``calibrated_cpus``: :func:`~.refit.profile_cpus`, None when the
    profile records none)."""
    algos = None if algorithms is None else tuple(algorithms)
    loaded = [load_profile(p) for p in profiles]     # once each: every pair reads them
    cpus = [profile_cpus(p) for p in loaded]
    rows = []
    for measured, measured_cpus in zip(loaded, cpus, strict=True):
        for source, source_cpus in zip(loaded, cpus, strict=True):
            for run in refit_profile(measured, calibration_from=source, skip_missing=True):
                s = error_stats(run.rows, min_bytes=min_bytes, algorithms=algos)
                rows.append({"measured": run.profile, "calibrated": run.calibrated_on,
                             "world_size": run.world_size, "n": s.n, "median": s.median,
                             "p90": s.p90, "max": s.max, "measured_cpus": measured_cpus,
                             "calibrated_cpus": source_cpus})
    return rows


def travel_table(profiles: Sequence[PathLike], *, min_bytes: int = TARGET_MIN_BYTES,
                 algorithms: Iterable[str] | None = TARGET_ALGORITHMS) -> str:
    """:func:`travel_rows` as a table, one line per (measured, calibrated, ws)."""
    return format_table(travel_rows(profiles, min_bytes=min_bytes, algorithms=algorithms),
                        TRAVEL_COLUMNS)


SPREAD_COLUMNS = (Column("size(B)", "nbytes"), Column("algorithm", "algorithm"),
                  Column("judged(us)", "judged_us", ".0f"),
                  Column("predicted", "predicted_us", ".0f"),
                  Column("error%", "error_pct", "+.0f"),
                  Column("fast quarter%", "fast_error_pct", "+.0f"),
                  Column("slow rounds%", "slow_pct", ".0f"))


def spread_rows(run: RefitRun, *, min_bytes: int = TARGET_MIN_BYTES,
                algorithms: Iterable[str] | None = TARGET_ALGORITHMS) -> list[dict[str, Any]]:
    """Per judged row that kept its rounds: the row with ``fast_error_pct``, the error of the
    25th percentile of its rounds, and ``slow_pct``, the share of rounds (%) slower than twice
    the fastest (each round's time is its slowest rank's, as the row's)."""
    algos = None if algorithms is None else set(algorithms)
    rows = []
    for r in run.rows:
        if r["nbytes"] < min_bytes or (algos is not None and r["algorithm"] not in algos) \
                or not r.get("seconds_per_rank") or not r.get("predicted_us"):
            continue
        rounds = np.asarray(r["seconds_per_rank"], dtype=float).max(axis=0) * 1e6
        fast = float(np.percentile(rounds, 25))
        rows.append({**r, "fast_error_pct": error_pct(fast, r["predicted_us"]),
                     "slow_pct": 100 * float(np.mean(rounds > 2 * rounds.min()))})
    return rows


def spread_table(run: RefitRun, *, min_bytes: int = TARGET_MIN_BYTES,
                 algorithms: Iterable[str] | None = TARGET_ALGORITHMS) -> str:
    """:func:`spread_rows` as a table: per judged row, the error of its judged value (the
    run's statistic of its rounds), of the fast quarter and the share of slow rounds."""
    head = f"{run_line(run)}\n# per-round spread of each judged row"
    return head + "\n" + format_table(spread_rows(run, min_bytes=min_bytes,
                                                   algorithms=algorithms), SPREAD_COLUMNS)



WINDOW_COLUMNS = (
    Column("profile", "profile"), Column("ws", "world_size"), Column("rounds", "rounds"),
    Column("windows", "windows"), Column("met", "met"),
    Column("median% (median)", "median_of_median", ".1f"),
    Column("median% (worst)", "worst_median", ".1f"),
    Column("p90% (median)", "median_of_p90", ".1f"), Column("p90% (worst)", "worst_p90", ".1f"))
"""The columns of :func:`~distlab.judge.windows.window_summary`'s rows."""


def window_table(rows: Sequence[dict[str, Any]], statistic: str) -> str:
    """Rows of :func:`~distlab.judge.windows.window_summary` (judged by ``statistic``) under
    :data:`WINDOW_COLUMNS`, after a ``#`` line saying what is judged and what ``met`` means."""
    head = (f"# windows of consecutive rounds, each priced with the calibration of its own "
            f"rounds; |error%| of rows >= {TARGET_MIN_BYTES} B of {', '.join(TARGET_ALGORITHMS)} "
            f"by the {statistic}; met: windows with median <= {TARGET_MEDIAN_PCT:g}% and "
            f"p90 <= {TARGET_P90_PCT:g}%")
    return head + "\n" + format_table(list(rows), WINDOW_COLUMNS)
