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

import sys
from collections.abc import Sequence
from typing import Any

from distlab.cli import options
from distlab.cli.run import UsageError, run_main
from distlab.collectives.model.calibration import STATISTICS
from distlab.judge.profile_args import loaded_profile, profile_dir_arg
from distlab.judge.tables import window_table
from distlab.judge.windows import default_lengths, window_problem, window_summary

__all__ = ["PROG", "main"]

PROG = "python -m distlab.judge windows"
_MUST = "must be a profile whose runs kept their rounds"


def _parser() -> options.Parser:
    p = options.parser(PROG, __doc__)
    p.add_argument("profiles", nargs="+", type=profile_dir_arg, metavar="DIR",
                   help="profile folders whose rows and calibration kept their rounds")
    p.add_argument("--rounds", type=options.int_list(1), default=None, metavar="N[,N...]",
                   help="comma list of window lengths in rounds (default: 5, 10, 20, 40 ... "
                        "up to the profile's rounds)")
    p.add_argument("--statistic", choices=STATISTICS, default="mean",
                   help="summarize rows and calibration by the mean (default) or the median of "
                        "each window's rounds")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m distlab.judge windows``: exit 0, 2 with one error line, or 130 on Ctrl-C
    (one line, no traceback; :func:`distlab.cli.run.run_main`)."""
    return run_main(PROG, _windows_command, argv, on_interrupt="nothing printed")


def _windows_command(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    rows: list[dict[str, Any]] = []
    for path in args.profiles:
        profile = loaded_profile(path, _MUST)
        problem = window_problem(profile, args.rounds)
        if problem is not None:
            raise UsageError(f"argument DIR: invalid value {str(path)!r}: {_MUST} ({problem})")
        rows += window_summary(path, args.rounds or default_lengths(profile),
                               statistic=args.statistic)
    print(window_table(rows, args.statistic))
    return 0


if __name__ == "__main__":
    sys.exit(main())
