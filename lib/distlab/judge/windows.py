"""How many timed rounds the model needs to be judged: a long profile cut into shorter ones (pure).

A profile's allreduce rows and its calibration are timed in the same rounds (the calibration's
patterns run inside every round, :class:`~distlab.collectives.runtime.rounds.RoundCalibrator`), and
both keep every round (``seconds_per_rank`` per row, ``round_seconds`` in the calibration). So any
run of consecutive rounds is itself a complete, shorter profile of the same machine at the same
time: its calibration fitted on those rounds alone
(:func:`~distlab.collectives.model.calibration.fit_rounds`), its rows summarized over the same
rounds. :func:`window_runs` cuts each allreduce run of a profile into ``rounds``-long windows (``[0,
rounds)``, ``[rounds, 2 rounds)`` ...; a shorter tail is left out) and prices every window with its
own calibration, as :mod:`distlab.judge.refit` prices a whole profile. :func:`window_summary` then
says, per world size and window length, in how many windows the model meets the target
(:data:`distlab.judge.refit.TARGET_MEDIAN_PCT`, :data:`distlab.judge.refit.TARGET_P90_PCT`).

What it answers: whether a miss of an N-round profile is the model's or the N rounds'. Both the
rows and the calibration are means of N slow-rank rounds, each known to about ``1/sqrt(N)`` of
their rounds' spread, and the model is judged against one with the other; windows of one long
profile, measured on one machine in one sitting, show how often N rounds are enough there.
Windows of one profile are not independent machines: they share the machine's state of that
hour, so they show the rounds' share of the error, not how far the model travels.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from distlab._checks import check_choice, check_int
from distlab.cli import options
from distlab.cli.run import UsageError, run_main
from distlab.collectives.model.calibration import STATISTICS, Calibration, fit_rounds
from distlab.collectives.model.predict import call_model
from distlab.judge.refit import (
    TARGET_ALGORITHMS,
    TARGET_MEDIAN_PCT,
    TARGET_MIN_BYTES,
    TARGET_P90_PCT,
    RefitRun,
    calibrated_runs,
    meets_target,
    profile_cpus,
    profile_dir_arg,
    refit_rows,
)
from distlab.profile.load import load_profile
from distlab.report.table import Column, format_table
from distlab.vocabulary import ErrorSummary

__all__ = ["SUMMARY_COLUMNS", "Window", "main", "window_calibration", "window_rows",
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


def window_runs(path: str | os.PathLike[str], rounds: int, *,
                statistic: str = "mean") -> list[Window]:
    """Every ``rounds``-long window of every allreduce run of the profile folder ``path``,
    each priced with the calibration of its own rounds (see the module docstring); in run order,
    then window order.

    Raises:
        ValueError: not a profile folder, no calibrated run, a calibration or row without
            rounds, rows and calibration with different round counts, or ``rounds`` longer than
            a run.
    """
    n_rounds = check_int("rounds", rounds, minimum=1)
    check_choice("statistic", statistic, STATISTICS)
    profile = load_profile(path)
    cpus = profile_cpus(profile)
    out = []
    for run in calibrated_runs(profile):
        cal = Calibration.from_dict(run["calibration"])
        total = len(cal.round_seconds)
        counts = {min(len(r) for r in row.get("seconds_per_rank") or [[]]) for row in run["rows"]}
        if total == 0 or counts != {total}:
            raise ValueError(f"profile {profile.path}, {run['backend']} world size "
                             f"{run['world_size']}: windows need rows and calibration timed in "
                             f"the same rounds; the calibration kept {total} rounds, the rows "
                             f"{sorted(counts)}")
        if n_rounds > total:
            raise ValueError(f"rounds must be <= the {total} rounds the {run['backend']} world "
                             f"size {run['world_size']} run of {profile.name} kept, got "
                             f"{n_rounds}")
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


def window_summary(path: str | os.PathLike[str], lengths: Sequence[int], *,
                   statistic: str = "mean", min_bytes: int = TARGET_MIN_BYTES,
                   algorithms: Iterable[str] | None = TARGET_ALGORITHMS
                   ) -> list[dict[str, Any]]:
    """Per world size and window length of ``lengths`` (each at most the profile's rounds):
    the windows, how many meet the target, and the median and worst over windows of their
    median and p90 ``|error%|`` (:func:`window_runs`)."""
    algos = None if algorithms is None else tuple(algorithms)
    out = []
    for length in lengths:
        windows = window_runs(path, length, statistic=statistic)
        for ws in dict.fromkeys(w.run.world_size for w in windows):
            stats = [w.stats(min_bytes=min_bytes, algorithms=algos) for w in windows
                     if w.run.world_size == ws]
            med = np.array([s.median for s in stats])
            p90 = np.array([s.p90 for s in stats])
            out.append({"profile": load_profile(path).name, "world_size": ws,
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


SUMMARY_COLUMNS = (
    Column("profile", "profile"), Column("ws", "world_size"), Column("rounds", "rounds"),
    Column("windows", "windows"), Column("met", "met"),
    Column("median% (median)", "median_of_median", ".1f"),
    Column("median% (worst)", "worst_median", ".1f"),
    Column("p90% (median)", "median_of_p90", ".1f"), Column("p90% (worst)", "worst_p90", ".1f"))


def _parser() -> argparse.ArgumentParser:
    p = options.parser("python -m distlab.judge windows", __doc__)
    p.add_argument("profiles", nargs="+", type=profile_dir_arg, metavar="DIR",
                   help="profile folders whose rows and calibration kept their rounds")
    p.add_argument("--rounds", type=options.int_list(1), default=None, metavar="N[,N...]",
                   help="comma list of window lengths in rounds (default: 5, 10, 20, 40 ... "
                        "up to the profile's rounds)")
    p.add_argument("--statistic", choices=STATISTICS, default="mean",
                   help="summarize rows and calibration by the mean (default) or the median of "
                        "each window's rounds")
    return p


def _default_lengths(path: Path) -> list[int]:
    total = min(len(r["calibration"].get("round_seconds") or [])
                for r in calibrated_runs(load_profile(path)))
    if total == 0:
        raise ValueError("a calibration kept no rounds (round_seconds): windows need them")
    out, n = [], 5
    while n <= total:
        out.append(n)
        n *= 2
    if not out or out[-1] != total:
        out.append(total)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m distlab.judge windows``: exit 0, 2 with one error line, or 130 on Ctrl-C
    (one line, no traceback; :func:`distlab.cli.run.run_main`)."""
    return run_main("python -m distlab.judge windows", _windows_command, argv,
                    on_interrupt="nothing printed")


def _windows_command(argv: list[str]) -> int:
    p = _parser()
    args = p.parse_args(argv)
    rows: list[dict[str, Any]] = []
    for path in args.profiles:
        try:
            lengths = args.rounds or _default_lengths(path)
            rows += window_summary(path, lengths, statistic=args.statistic)
        except (ValueError, KeyError, TypeError) as exc:
            raise UsageError(f"argument DIR: invalid value {str(path)!r}: must be a profile "
                             f"whose runs kept their rounds ({exc})") from None
    print(f"# windows of consecutive rounds, each priced with the calibration of its own "
          f"rounds; |error%| of rows >= {TARGET_MIN_BYTES} B of {', '.join(TARGET_ALGORITHMS)} "
          f"by the {args.statistic}; met: windows with median <= {TARGET_MEDIAN_PCT:g}% and "
          f"p90 <= {TARGET_P90_PCT:g}%")
    print(format_table(rows, SUMMARY_COLUMNS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
