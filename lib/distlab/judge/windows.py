"""A long profile cut into windows of consecutive rounds, each priced on its own (pure).

A profile's allreduce rows and its calibration are timed in the same rounds, and both keep every
round (``seconds_per_rank`` per row, ``round_seconds`` in the calibration), so a run of
consecutive rounds is itself a shorter profile of the same machine at the same time.
:func:`window_runs` cuts each allreduce run into ``rounds``-long windows (``[0, rounds)``,
``[rounds, 2 rounds)`` ...; a shorter tail is left out) and prices every window with the
calibration fitted on its rounds alone (:func:`window_calibration`), its rows summarized over
the same rounds (:func:`window_rows`), as :mod:`distlab.judge.refit` prices a whole profile.
:func:`window_summary` says, per world size and window length, in how many windows the model
meets the target (:data:`distlab.judge.refit.TARGET_MEDIAN_PCT`,
:data:`distlab.judge.refit.TARGET_P90_PCT`). :func:`window_problem` says why a profile cannot be
cut, so a command checks its input first. Why this answers how many rounds a judgement needs:
``python -m distlab.judge windows --help`` (:mod:`distlab.judge.windows_command`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from distlab._checks import check_choice, check_int
from distlab.collectives.model.calibration import STATISTICS, Calibration, fit_rounds
from distlab.collectives.model.predict import call_model
from distlab.judge.refit import (
    TARGET_ALGORITHMS,
    TARGET_MIN_BYTES,
    RefitRun,
    as_profile,
    calibrated_runs,
    meets_target,
    profile_cpus,
    refit_problem,
    refit_rows,
)
from distlab.profile.load import Profile
from distlab.vocabulary import ErrorSummary

__all__ = ["Window", "default_lengths", "window_calibration", "window_problem", "window_rows",
           "window_runs", "window_summary"]


@dataclass(frozen=True)
class Window:
    """One window of one allreduce run, priced with the calibration of its own rounds.

    Attributes:
        start, stop: the window's rounds, ``[start, stop)`` (0-based, timed rounds only).
        run: the window as a :class:`~distlab.judge.refit.RefitRun` (``profile`` names the window).
    """

    start: int
    stop: int
    run: RefitRun

    @property
    def rounds(self) -> int:
        """Rounds in the window."""
        return self.stop - self.start

    def stats(self, *, min_bytes: int = TARGET_MIN_BYTES,
              algorithms: Iterable[str] | None = TARGET_ALGORITHMS) -> ErrorSummary:
        """``|error%|`` of the window's judged rows (:meth:`distlab.judge.refit.RefitRun.stats`)."""
        return self.run.stats(min_bytes=min_bytes, algorithms=algorithms)


def window_calibration(cal: Calibration | Mapping[str, Any], start: int, stop: int,
                       statistic: str = "mean") -> Calibration:
    """``cal`` fitted again on its rounds ``[start, stop)`` alone, each point summarized by
    ``statistic`` (:func:`~distlab.collectives.model.calibration.fit_rounds`).

    Raises:
        ValueError: a calibration that kept no rounds, or a window outside them.
    """
    c = cal if isinstance(cal, Calibration) else Calibration.from_dict(dict(cal))
    check_choice("statistic", statistic, STATISTICS)
    n = len(c.round_seconds)
    if n == 0:
        raise ValueError("a window needs the calibration's rounds (round_seconds); this "
                         "calibration kept none")
    _check_window(start, stop, n)
    return fit_rounds(c.sizes, c.round_seconds[start:stop], statistic=statistic,
                      builtin_floor_bytes=c.builtin_floor_bytes, world_size=c.world_size,
                      backend=c.backend, dtype=c.dtype, method=c.method,
                      cpus_allowed=c.cpus_allowed, local_world_size=c.local_world_size)


def window_rows(rows: Sequence[Mapping[str, Any]], start: int, stop: int
                ) -> list[dict[str, Any]]:
    """The rows with every rank's rounds cut to ``[start, stop)`` (``seconds_per_rank``), so
    the row's statistic and noise are those of the window; ``time_us`` (the stored median of
    all rounds) is left out, since it is not the window's.

    Raises:
        ValueError: a row that kept no rounds, or a window outside a row's rounds.
    """
    out = []
    for i, row in enumerate(rows):
        per_rank = row.get("seconds_per_rank")
        if not per_rank:
            raise ValueError(f"row {i} ({row.get('algorithm')}, {row.get('nbytes')} B) kept no "
                             "rounds (seconds_per_rank); a window needs them")
        _check_window(start, stop, min(len(r) for r in per_rank))
        cut = {k: v for k, v in row.items() if k != "time_us"}
        cut["seconds_per_rank"] = [list(r[start:stop]) for r in per_rank]
        out.append(cut)
    return out


def window_runs(path: str | os.PathLike[str] | Profile, rounds: int, *,
                statistic: str = "mean") -> list[Window]:
    """Every ``rounds``-long window of every allreduce run of the profile folder ``path`` (or
    its loaded :class:`~distlab.profile.load.Profile`),
    each priced with the calibration of its own rounds (see the module docstring); in run order,
    then window order.

    Raises:
        ValueError: not a profile folder, no calibrated run, a calibration or row without
            rounds, rows and calibration with different round counts, or ``rounds`` longer than
            a run.
    """
    n_rounds = check_int("rounds", rounds, minimum=1)
    check_choice("statistic", statistic, STATISTICS)
    profile = as_profile(path)
    cpus = profile_cpus(profile)
    out = []
    for run in calibrated_runs(profile):
        cal = Calibration.from_dict(run["calibration"])
        total = len(cal.round_seconds)
        problem = _run_problem(profile, run, n_rounds)
        if problem is not None:
            raise ValueError(problem)
        for start in range(0, total - n_rounds + 1, n_rounds):
            stop = start + n_rounds
            wcal = window_calibration(cal, start, stop, statistic).to_dict()
            model = call_model(wcal, cpus=cpus)
            rows = refit_rows(window_rows(run["rows"], start, stop), run["world_size"], model,
                              statistic)
            name = f"{profile.name}[{start}:{stop}]"
            out.append(Window(start, stop, RefitRun(name, name, run["backend"],
                                                    run["world_size"], rows, wcal, statistic)))
    return out


def window_summary(path: str | os.PathLike[str] | Profile, lengths: Sequence[int], *,
                   statistic: str = "mean", min_bytes: int = TARGET_MIN_BYTES,
                   algorithms: Iterable[str] | None = TARGET_ALGORITHMS
                   ) -> list[dict[str, Any]]:
    """Per world size and window length of ``lengths`` (each at most the profile's rounds):
    the windows, how many meet the target, and the median and worst over windows of their
    median and p90 ``|error%|`` (:func:`window_runs`)."""
    algos = None if algorithms is None else tuple(algorithms)
    profile = as_profile(path)                    # loaded once for every length
    out = []
    for length in lengths:
        windows = window_runs(profile, length, statistic=statistic)
        for ws in dict.fromkeys(w.run.world_size for w in windows):
            stats = [w.stats(min_bytes=min_bytes, algorithms=algos) for w in windows
                     if w.run.world_size == ws]
            med = np.array([s.median for s in stats])
            p90 = np.array([s.p90 for s in stats])
            out.append({"profile": profile.name, "world_size": ws,
                        "rounds": length, "windows": len(stats),
                        "met": sum(meets_target(s) for s in stats),
                        "median_of_median": float(np.median(med)),
                        "worst_median": float(med.max()),
                        "median_of_p90": float(np.median(p90)), "worst_p90": float(p90.max())})
    return out


def _check_window(start: int, stop: int, total: int) -> None:
    check_int("start", start, minimum=0)
    check_int("stop", stop, minimum=start + 1)
    if stop > total:
        raise ValueError(f"window [{start}, {stop}) is past the {total} rounds kept")



def _run_problem(profile: Profile, run: Mapping[str, Any], n_rounds: int) -> str | None:
    """Why ``run`` (an allreduce run of ``profile``) cannot be cut into ``n_rounds``-long
    windows, or None."""
    total = len(Calibration.from_dict(run["calibration"]).round_seconds)
    counts = {min(len(r) for r in row.get("seconds_per_rank") or [[]]) for row in run["rows"]}
    if total == 0 or counts != {total}:
        return (f"profile {profile.path}, {run['backend']} world size {run['world_size']}: "
                "windows need rows and calibration timed in the same rounds; the calibration "
                f"kept {total} rounds, the rows {sorted(counts)}")
    if n_rounds > total:
        return (f"rounds must be <= the {total} rounds the {run['backend']} world size "
                f"{run['world_size']} run of {profile.name} kept, got {n_rounds}")
    return None


def _rounds_kept(profile: Profile) -> int:
    """The fewest rounds a calibration of ``profile``'s calibrated runs kept."""
    return min(len(r["calibration"].get("round_seconds") or []) for r in calibrated_runs(profile))


def default_lengths(profile: Profile) -> list[int]:
    """The window lengths judged when none are asked (rounds): 5, 10, 20, 40 ... up to the
    fewest rounds a calibrated run of ``profile`` kept, and that count; [] when one kept none."""
    total = _rounds_kept(profile)
    if total == 0:
        return []
    out, n = [], 5
    while n <= total:
        out.append(n)
        n *= 2
    if not out or out[-1] != total:
        out.append(total)
    return out


def window_problem(profile: Profile, lengths: Sequence[int] | None = None) -> str | None:
    """Why :func:`window_summary` cannot cut ``profile`` into windows of ``lengths`` (None: the
    :func:`default_lengths`), in the words :func:`window_runs` would raise; None when it can.
    Checked in its order: a rehearsal or no calibrated run
    (:func:`~distlab.judge.refit.refit_problem`), a calibration that kept no rounds (for the
    default lengths), then per length and run: rows and calibration with different round counts,
    a length longer than the rounds kept."""
    problem = refit_problem(profile)
    if problem is not None:
        return problem
    if lengths is None:
        if _rounds_kept(profile) == 0:
            return "a calibration kept no rounds (round_seconds): windows need them"
        lengths = default_lengths(profile)
    for n_rounds in lengths:
        for run in calibrated_runs(profile):
            problem = _run_problem(profile, run, n_rounds)
            if problem is not None:
                return problem
    return None
