"""What a judgement of the model says, as numbers a reader can check (pure).

:mod:`.refit` prices every row of a profile again and :func:`~.refit_summary.summary_rows` sums the
errors up per profile and world size; the functions here count and bound what those rows and
summaries hold, so that a sentence such as "met on 9 of 9 four-rank runs" or "tree is measured
55% to 94% above its prediction" is a value a cell computes and asserts:

- :func:`target_met`: how many (profile, world size) runs of a summary meet the target, of how
  many, for one world size and statistic.
- :func:`value_range`: the smallest and largest value of one key over the rows of a selection
  (algorithms, a range of sizes).
- :func:`rounds_kept`: how many timed rounds a run's rows kept.
- :func:`rerun_difference`: how far the rows of two runs of the same sweep (the same machine
  measured twice) differ from each other, judged by the median or the mean of their rounds.
- :data:`JUDGED_COLUMNS`, :func:`judged_table`: the columns of a refit summary that judge the
  model as it is, and that summary as a table no wider than a notebook shows.
- :func:`profile_facts`: per profile folder, what its judgement rests on (when it was written,
  the CPUs its ranks had, the rounds its rows kept, the statistic it is judged by).

Pure: reads rows, summaries and profile folders; starts nothing.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from distlab._checks import check_choice
from distlab.collectives.model.calibration import STATISTICS
from distlab.collectives.model.noise import row_seconds
from distlab.judge.refit import (
    TARGET_ALGORITHMS,
    TARGET_MIN_BYTES,
    RefitRun,
    error_stats,
    profile_cpus,
    refit_profile,
)
from distlab.profile.load import load_profile
from distlab.report.table import Column, format_table
from distlab.vocabulary import ErrorSummary, error_pct

__all__ = ["JUDGED_COLUMNS", "PROFILE_COLUMNS", "judged_table", "profile_facts",
           "rerun_difference", "rounds_kept", "target_met", "value_range"]


def target_met(summary: Iterable[Mapping[str, Any]], *, world_size: int | None = None,
               statistic: str | None = None) -> tuple[int, int]:
    """``(met, runs)`` over the single runs of ``summary`` (rows of
    :func:`~.refit_summary.summary_rows`): those of one profile and one world size (the
    ``"all"`` rows that pool several runs are left out), of ``world_size`` and judged by
    ``statistic`` (None: any); ``met`` counts the rows whose ``target`` is ``"met"``."""
    if statistic is not None:
        check_choice("statistic", statistic, STATISTICS)
    runs = [r for r in summary
            if r["profile"] != "all" and isinstance(r["world_size"], int)
            and (world_size is None or r["world_size"] == world_size)
            and (statistic is None or r["statistic"] == statistic)]
    return sum(r["target"] == "met" for r in runs), len(runs)


def value_range(rows: Iterable[Mapping[str, Any]], key: str, *,
                algorithms: Iterable[str] | None = None, min_bytes: int | None = None,
                max_bytes: int | None = None) -> tuple[float, float]:
    """``(min, max)`` of ``row[key]`` over the rows of ``algorithms`` (None: all) whose
    ``nbytes`` lies in ``[min_bytes, max_bytes]`` (None: unbounded on that side; rows are
    filtered by ``algorithm``/``nbytes`` only when those are given); rows whose value is
    missing, None or not finite are left out.

    Raises:
        ValueError: no row of the selection has a finite value for ``key``.
    """
    algos = None if algorithms is None else set(algorithms)
    values = []
    for r in rows:
        if algos is not None and r["algorithm"] not in algos:
            continue
        if (min_bytes is not None and r["nbytes"] < min_bytes) \
                or (max_bytes is not None and r["nbytes"] > max_bytes):
            continue
        value = r.get(key)
        if value is not None and math.isfinite(float(value)):
            values.append(float(value))
    if not values:
        raise ValueError(f"no row of the selection (algorithms={algorithms!r}, "
                         f"min_bytes={min_bytes!r}, max_bytes={max_bytes!r}) has a finite "
                         f"value for key {key!r}")
    return min(values), max(values)


def rounds_kept(run: RefitRun) -> int | None:
    """The fewest timed rounds any row of ``run`` kept (the length of each rank's list in its
    ``seconds_per_rank``), or None when a row kept none (it has only its stored median)."""
    counts = []
    for row in run.rows:
        per_rank = row.get("seconds_per_rank")
        if not per_rank:
            return None
        counts.append(min(len(r) for r in per_rank))
    return min(counts) if counts else None


def rerun_difference(first: RefitRun, second: RefitRun, statistic: str = "mean", *,
                     min_bytes: int = TARGET_MIN_BYTES,
                     algorithms: Iterable[str] | None = TARGET_ALGORITHMS) -> ErrorSummary:
    """How far two measurements of the same sweep differ: for every (algorithm, size) row of
    ``first`` with a row in ``second`` (of ``algorithms``, None: all, and at least
    ``min_bytes``), ``|100 (s - f) / f|`` where ``f`` and ``s`` are the two rows' seconds
    under ``statistic`` (:func:`~.noise.row_seconds`: the median or the mean of the slowest
    rank's rounds); their median, p90 and max as :class:`~distlab.vocabulary.ErrorSummary`.

    Raises:
        ValueError: the runs differ in backend or world size, ``statistic`` is unknown, a row
            lacks the rounds ``"mean"`` needs, or no row pairs up.
    """
    check_choice("statistic", statistic, STATISTICS)
    if (first.backend, first.world_size) != (second.backend, second.world_size):
        raise ValueError(f"second must be a run of the same backend and world size as first "
                         f"({first.backend}, {first.world_size}), got ({second.backend}, "
                         f"{second.world_size})")
    theirs = {(r["algorithm"], r["nbytes"]): r for r in second.rows}
    rows = []
    for r in first.rows:
        other = theirs.get((r["algorithm"], r["nbytes"]))
        if other is None:
            continue
        f, s = row_seconds(r, statistic), row_seconds(other, statistic)
        rows.append({"algorithm": r["algorithm"], "nbytes": r["nbytes"],
                     "difference_pct": error_pct(s, f)})
    stats = error_stats(rows, "difference_pct", min_bytes=min_bytes, algorithms=algorithms)
    if stats.n == 0:
        raise ValueError(f"no row of {first.profile} (of {algorithms!r}, >= {min_bytes} B) has "
                         f"a row of the same algorithm and size in {second.profile}")
    return stats


PROFILE_COLUMNS = (Column("profile", "profile"), Column("written (UTC)", "written_at"),
                   Column("cpus", "cpus"), Column("ws", "world_sizes"),
                   Column("rounds", "rounds"), Column("judged by", "statistic"),
                   Column("collectives(s)", "collectives_seconds", ".0f"))
"""The columns of :func:`profile_facts` as a table."""


def profile_facts(profiles: Sequence[str | os.PathLike[str]]) -> list[dict[str, Any]]:
    """One dict per profile folder: what its judgement rests on.

    ``profile`` (folder name), ``written_at`` (the date of its provenance, ``YYYY-MM-DD HH:MM``
    UTC: when the profile was written, at the end of its run), ``cpus``
    (:func:`~.refit.profile_cpus`), ``world_sizes`` (its calibrated allreduce runs',
    comma-joined), ``rounds`` (the fewest timed rounds a row kept,
    :func:`rounds_kept`; None without rounds), ``statistic`` (what :func:`~.refit.refit_profile`
    judges it by, comma-joined when its runs differ) and ``collectives_seconds`` (how long its
    collectives part ran; None when it records no time).

    Raises:
        ValueError: a folder is not a profile with calibrated allreduce runs.
    """
    out = []
    for path in profiles:
        profile = load_profile(path)
        runs = refit_profile(path)
        rounds = [r for r in (rounds_kept(run) for run in runs) if r is not None]
        date = str((profile.index.get("provenance") or {}).get("date") or "")
        seconds = ((profile.index.get("parts") or {}).get("collectives") or {}).get("seconds")
        out.append({"profile": profile.name, "written_at": date[:16].replace("T", " "),
                    "cpus": profile_cpus(profile),
                    "world_sizes": ",".join(str(run.world_size) for run in runs),
                    "rounds": min(rounds) if len(rounds) == len(runs) else None,
                    "statistic": ",".join(dict.fromkeys(run.statistic for run in runs)),
                    "collectives_seconds": None if seconds is None else float(seconds)})
    return out


JUDGED_COLUMNS = (Column("profile", "profile"), Column("ws", "world_size"),
                  Column("by", "statistic"), Column("n", "after_n"),
                  Column("median%", "after_median", ".1f"), Column("p90%", "after_p90", ".1f"),
                  Column("max%", "after_max", ".1f"), Column("target", "target"),
                  Column("noise med%", "noise_median", ".1f"),
                  Column("noise p90%", "noise_p90", ".1f"), Column("in noise", "within_noise"))
"""The columns of :func:`~.refit_summary.summary_rows` that judge the model as it is (not the
predictions stored in the profiles): per (profile, world size), the statistic its rows are
judged ``by``, ``n`` judged rows, their median, p90 and max ``|error%|``, the target, and the
median and p90 of the rows' noise with how many predictions lie inside it. The calibration and
the backend are columns of :func:`judged_table` only where they are not the same for every
row."""

_CALIBRATED_ON = Column("calibrated on", "calibrated_on")
_BACKEND = Column("backend", "backend")


def judged_table(summary: Sequence[Mapping[str, Any]]) -> str:
    """``summary`` (rows of :func:`~.refit_summary.summary_rows`) under :data:`JUDGED_COLUMNS`, with
    ``calibrated on`` after the profile only when a row was priced with another profile's
    calibration (``calibrated_on`` neither its own profile nor ``"own"``) and ``backend`` only
    when the rows hold more than one. With profile names of up to 32 characters a line is at
    most 110 characters wide."""
    rows = [dict(r) for r in summary]
    columns = list(JUDGED_COLUMNS)
    if len({str(r["backend"]) for r in rows}) > 1:
        columns.insert(2, _BACKEND)
    if any(r["calibrated_on"] not in (r["profile"], "own") for r in rows):
        columns.insert(1, _CALIBRATED_ON)
    return format_table(rows, columns)
