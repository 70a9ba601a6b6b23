"""``python -m distlab.judge travel DIR [DIR ...]``: how far the model travels between machines.

    python -m distlab.judge travel results/profiles/vm-*

Every profile's rows (measured on) priced with every profile's calibration (calibrated on) of
the same backend and world size: the median, p90 and maximum ``|error%|`` over the judged rows
(:func:`distlab.judge.tables.travel_table`). A folder that is not a profile with calibrated
allreduce runs, or a rehearsal, is one error line, exit 2. Reads JSON only; measures nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from distlab.cli import options
from distlab.cli.run import UsageError, run_main
from distlab.judge.profile_args import loaded_profile, profile_dir_arg
from distlab.judge.refit import TARGET_ALGORITHMS, TARGET_MIN_BYTES, refit_problem
from distlab.judge.tables import travel_table

__all__ = ["PROG", "main"]

PROG = "python -m distlab.judge travel"
_MUST = "must be profiles with calibrated allreduce runs"


def _travel_command(argv: list[str]) -> int:
    p = options.parser(PROG, __doc__)
    p.add_argument("profiles", nargs="+", type=profile_dir_arg, metavar="DIR",
                   help="profile folders: each is priced with every one's calibration")
    p.add_argument("--min-bytes", type=options.size_bytes, default=TARGET_MIN_BYTES,
                   help="judge rows of at least this many bytes (1K = 1024)")
    args = p.parse_args(argv)
    for path in args.profiles:
        problem = refit_problem(loaded_profile(path, _MUST))
        if problem is not None:
            raise UsageError(f"argument DIR: {_MUST} ({problem})")
    table = travel_table(args.profiles, min_bytes=args.min_bytes)
    print(f"# |error%| of rows >= {args.min_bytes} B of {', '.join(TARGET_ALGORITHMS)}: each "
          "profile (measured on) priced with each profile's calibration of the same world size")
    print(table)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m distlab.judge travel``: exit 0, 2 with one error line, 130 on Ctrl-C."""
    return run_main(PROG, _travel_command, argv, on_interrupt="nothing printed")


if __name__ == "__main__":
    sys.exit(main())
