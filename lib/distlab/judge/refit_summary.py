"""The refitted runs summed up: ``|error%|`` before and after, the target, the rows' noise (pure).

:func:`summary_rows` turns :class:`~distlab.judge.refit.RefitRun` s into one dict per (profile,
world size), per profile and over everything: the count, median, 90th percentile and maximum of
``|error%|`` of the judged rows with the predictions stored in the profile (``before_*``) and with
this model (``after_*``), whether the after numbers meet the target, and how well the rows are
known (``noise_median``/``noise_p90``: the rows' ``noise_pct``, percent; ``within_noise``:
predictions inside the rows' interval / judged rows). :mod:`distlab.judge.refit_report` prints
them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from distlab.judge.refit import (
    TARGET_ALGORITHMS,
    TARGET_MIN_BYTES,
    RefitRun,
    error_stats,
    meets_target,
)

__all__ = ["calibration_source", "summary_rows"]


def _summary_row(profile: str, calibrated_on: str, backend: str, ws: Any,
                 rows: list[dict[str, Any]], min_bytes: int,
                 algorithms: Iterable[str] | None, statistic: str) -> dict[str, Any]:
    algos = None if algorithms is None else tuple(algorithms)
    before = error_stats(rows, "stored_error_pct", min_bytes=min_bytes, algorithms=algos)
    after = error_stats(rows, "error_pct", min_bytes=min_bytes, algorithms=algos)
    noise = error_stats(rows, "noise_pct", min_bytes=min_bytes, algorithms=algos)
    judged = [r for r in rows if r.get("within_noise") is not None
              and r["nbytes"] >= min_bytes and (algos is None or r["algorithm"] in algos)]
    inside = f"{sum(bool(r['within_noise']) for r in judged)}/{len(judged)}" if judged else "-"
    return {"profile": profile, "calibrated_on": calibrated_on, "backend": backend,
            "world_size": ws, "statistic": statistic, "before_n": before.n,
            "before_median": before.median,
            "before_p90": before.p90, "before_max": before.max, "after_n": after.n,
            "after_median": after.median, "after_p90": after.p90, "after_max": after.max,
            "target": "met" if meets_target(after) else "missed",
            "noise_median": noise.median, "noise_p90": noise.p90, "within_noise": inside}


def summary_rows(runs: Sequence[RefitRun], *, min_bytes: int = TARGET_MIN_BYTES,
                 algorithms: Iterable[str] | None = TARGET_ALGORITHMS) -> list[dict[str, Any]]:
    """One row per (profile, world size), one per profile (``world_size`` "all") when it has
    more than one run, and one over everything (``profile`` "all") when there are several
    profiles: counts and median/p90/max of ``|error%|`` before and after, and the target."""
    algos = None if algorithms is None else tuple(algorithms)
    out = []
    names = list(dict.fromkeys(r.profile for r in runs))
    for name in names:
        mine = [r for r in runs if r.profile == name]
        for r in mine:
            out.append(_summary_row(name, r.calibrated_on, r.backend, r.world_size, r.rows,
                                    min_bytes, algos, r.statistic))
        if len(mine) > 1:
            cal = ",".join(dict.fromkeys(r.calibrated_on for r in mine))
            out.append(_summary_row(name, cal, ",".join(dict.fromkeys(r.backend for r in mine)),
                                    "all", [x for r in mine for x in r.rows], min_bytes, algos,
                                    _statistics(mine)))
    if len(names) > 1:
        out.append(_summary_row("all", "own" if all(r.profile == r.calibrated_on for r in runs)
                                else "given", ",".join(dict.fromkeys(r.backend for r in runs)),
                                "all", [x for r in runs for x in r.rows], min_bytes, algos,
                                _statistics(runs)))
    return out


def _statistics(runs: Sequence[RefitRun]) -> str:
    return ",".join(dict.fromkeys(r.statistic for r in runs))


def calibration_source(runs: Sequence[RefitRun]) -> str | None:
    """Where every run's calibration came from, said once: ``"each profile's own"``, the one
    profile that calibrated them all, or None when they differ in some other way (then each row
    says it)."""
    if all(r.calibrated_on == r.profile for r in runs):
        return "each profile's own"
    sources = set(r.calibrated_on for r in runs)
    return next(iter(sources)) if len(sources) == 1 else None
