"""Re-predict every allreduce row of profile folders from their stored calibrations (offline).

    python -m distlab.judge refit results/profiles/vm-2026-11-23 results/profiles/h100-2026-11-23
    python -m distlab.judge refit results/profiles/* --json refit.json
    # calibrated on one machine, measured on another:
    python -m distlab.judge refit results/profiles/h100-2026-11-23 \\
        --calibration-from results/profiles/vm-2026-11-23

A profile's collectives part stores, for every allreduce sweep, the rows (measured times) and the
calibration fitted on the same timed rounds, with its per-size series. This command prices every row
again, distlab's algorithms and ``builtin`` alike, with the model of
:mod:`distlab.collectives.model.predict` (per-size rates of :mod:`distlab.collectives.model.rates`;
the builtin as the backend's own schedule; the cores per rank from the calibration, else from the
profile's ``cpus_allowed``), so every model change is judged on every committed machine at once,
without running anything. The measured values are the profile's, untouched.

What is judged (``--statistic``): the model prices a call as the sum of its steps' costs, and sums
add as means do, not as medians (the median of a sum of skewed or two-regime step times is not the
sum of their medians); a training loop, too, pays the mean. So by default every row is judged by the
**mean** of its slowest-rank rounds, priced with the calibration fitted again from its own recorded
rounds by their means (:func:`~distlab.collectives.model.calibration.restate_calibration`). A
profile whose calibration kept no rounds has only medians, and is
judged median against median; the ``statistic`` column says which. ``--statistic median`` judges
every profile by medians, as measured rows' ``time_us`` are.

It prints, per profile and world size (and per profile), the median, 90th percentile and maximum of
``|error%|`` over the judged rows (by default sizes >= 64 KiB of ring, tree, recursive_doubling,
rabenseifner and builtin: :data:`TARGET_ALGORITHMS`), before (the predictions stored in the
profile, made when it was measured; builtin had none) and after (this model), and whether the after
numbers meet the target (median <= 15%, p90 <= 35%). Beside them, how well the rows themselves are
known (:mod:`distlab.collectives.model.noise`): the median and p90 of the rows' ``noise_pct`` (how
far each row's median round could land on a re-run of the same rounds, a 90% bootstrap interval)
and ``in noise`` (rows whose prediction lies inside that interval / judged rows). Where the noise
is as large as the target, a miss cannot be told from the measurement's own scatter; where it is
small and the prediction is outside, the model is wrong. The printed report fits 110 columns: head
lines say once what every row shares (where the calibrations came from, the backend), a first table
the model now with the rows' noise (:data:`NOW_COLUMNS`), a second the stored predictions beside it
(:data:`BEFORE_COLUMNS`). ``--json OUT`` writes every run with its rows in the profile's format
(``predicted_us`` and ``error_pct`` filled, ``judged_us`` the measured value under the run's
statistic, ``stored_predicted_us``/ ``stored_error_pct`` keep the old ones) and the summary. A bad
argument exits 2 with one error line.

Pure: no process group, no ``torch.distributed`` (reading JSON and pricing schedules only).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from distlab.cli import options
from distlab.cli.run import UsageError, run_main
from distlab.collectives.model.calibration import STATISTICS
from distlab.judge.profile_args import loaded_profile, profile_dir_arg
from distlab.judge.refit import (
    JUDGEABLE,
    TARGET_ALGORITHMS,
    TARGET_MIN_BYTES,
    RefitRun,
    refit_problem,
    refit_profile,
    rehearsal_text,
)
from distlab.judge.refit_report import summary_head, summary_table
from distlab.judge.refit_summary import summary_rows
from distlab.profile.load import Profile
from distlab.report.jsonfile import write_json
from distlab.report.provenance import provenance

__all__ = ["PROG", "main"]

PROG = "python -m distlab.judge refit"
_MUST = "must be a profile with calibrated allreduce runs"


def _parser() -> options.Parser:
    p = options.parser(PROG, __doc__)
    p.add_argument("profiles", nargs="+", type=profile_dir_arg, metavar="DIR",
                   help="profile folders to re-predict")
    p.add_argument("--json", metavar="OUT", default=None, type=options.output_file,
                   help="also write every run's rows and the summary to this JSON file")
    p.add_argument("--calibration-from", metavar="DIR", type=profile_dir_arg, default=None,
                   help="price the rows with this profile's calibration (same backend and "
                        "world size) instead of each profile's own")
    p.add_argument("--min-bytes", type=options.size_bytes, default=TARGET_MIN_BYTES,
                   help="judge rows of at least this many bytes (1K = 1024)")
    p.add_argument("--algorithms", type=options.comma_choices(JUDGEABLE),
                   default=",".join(TARGET_ALGORITHMS),
                   help="comma list of the algorithms judged, or 'all'")
    p.add_argument("--statistic", choices=STATISTICS, default="mean",
                   help="judge each row by the mean (default) or the median of its slowest-rank "
                        "rounds, with the calibration restated the same way (profiles whose "
                        "calibration kept no rounds: median)")
    p.add_argument("--constant", action="store_true",
                   help="price every size with the calibration's one beta and gamma (the model "
                        "without per-size rates), for comparison")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m distlab.judge refit``: exit 0, 2 with one error line, or 130 on Ctrl-C
    (one line, no traceback; :func:`distlab.cli.run.run_main`)."""
    return run_main(PROG, _refit_command, argv, on_interrupt="nothing printed")


def _judged(path: Path, source: Profile | None, alone: bool) -> bool:
    """Check the profile folder ``path`` (and ``source``, the ``--calibration-from`` profile)
    before it is priced: False for a rehearsal to skip (one line says so), True to price it.

    Raises:
        UsageError: a rehearsal named alone or with ``--calibration-from``, or a folder that
            cannot be priced (:func:`~distlab.judge.refit.refit_problem`).
    """
    measured = loaded_profile(path, _MUST)
    if measured.rehearsal:
        if alone or source is not None:
            raise UsageError(f"argument DIR: invalid value {str(path)!r}: "
                             f"{rehearsal_text(measured)}")
        print(f"# skipped {path}: a rehearsal, no model is judged on it")
        return False
    if source is not None and source.rehearsal:
        raise UsageError(f"argument DIR: invalid value {str(path)!r}: {rehearsal_text(source)}")
    problem = refit_problem(measured, source)
    if problem is not None:
        raise UsageError(f"argument DIR: invalid value {str(path)!r}: {_MUST} ({problem})")
    return True


def _refit_command(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    source = (None if args.calibration_from is None
              else loaded_profile(args.calibration_from, _MUST))
    runs: list[RefitRun] = []
    for path in args.profiles:
        if _judged(path, source, alone=len(args.profiles) == 1):
            runs += refit_profile(path, calibration_from=args.calibration_from,
                                  per_size=not args.constant, statistic=args.statistic)
    if not runs:
        raise UsageError("argument DIR: every profile named is a rehearsal: nothing to judge")
    algos = tuple(args.algorithms)
    print("\n".join(summary_head(runs, min_bytes=args.min_bytes, algorithms=algos,
                                 statistic=args.statistic, constant=args.constant)))
    print()
    print(summary_table(runs, min_bytes=args.min_bytes, algorithms=algos))
    if args.json:
        doc = {"provenance": provenance(), "min_bytes": args.min_bytes, "algorithms": list(algos),
               "model": "constant" if args.constant else "per-size",
               "statistic": args.statistic,
               "summary": summary_rows(runs, min_bytes=args.min_bytes, algorithms=algos),
               "runs": [{"profile": r.profile, "calibrated_on": r.calibrated_on,
                         "backend": r.backend, "world_size": r.world_size,
                         "statistic": r.statistic, "calibration": r.calibration,
                         "rows": r.rows} for r in runs]}
        print(f"# wrote {write_json(args.json, doc)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
