"""Median summary of repeated allreduce benchmark runs (what notebook 04 shows).

    python -m distlab.judge summary results/allreduce_ws*_run*.json \\
        --out results/allreduce_summary.json

One run on a shared machine can be off by tens of percent; the committed summary is the median
over independent runs of ``python -m distlab.bench allreduce ... --json`` of each world size.
Per world size and per (size, algorithm) row, in the first run's order:

- ``time_us``: median over runs of the run's ``time_us`` (itself the median over iterations
  of the slowest rank); ``algbw_gbps``/``busbw_gbps`` from that median time;
- ``predicted_us``: median over runs of each run's prediction (each run is predicted from its
  own calibration); ``error_pct``: median over runs of each run's own error, in percent;
- ``ratio_vs_builtin_runs``: per run, busbw / the built-in allreduce's busbw at the same size
  in the same run (so load that hit a run hits both); ``ratio_vs_builtin_paired_median``
  their median;
- ``wrong``: the sum over runs (must be 0);
- ``*_runs`` lists keep every run's value, rounded for reading.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from distlab.cli import options
from distlab.cli.run import UsageError, run_main
from distlab.judge.summary import group_runs, summarize_files, sweep_problem
from distlab.judge.summary_report import SUMMARY_COLUMNS
from distlab.report.jsonfile import write_json
from distlab.report.table import format_table
from distlab.report.words import count

__all__ = ["PROG", "main"]

PROG = "python -m distlab.judge summary"


def _parser() -> options.Parser:
    p = options.parser(PROG, __doc__)
    p.add_argument("runs", nargs="+", metavar="RUN",
                   help="allreduce benchmark JSON files (any world sizes)")
    p.add_argument("--out", "--json", dest="out", metavar="PATH", default=None,
                   type=options.output_file, help="where to write the summary JSON")
    p.add_argument("--note", default="", help="text stored as the summary's note (default: a "
                                              "description of how it was made)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m distlab.judge summary``: the table on stdout, the JSON at ``--out``; exit 1
    when a run has wrong elements, 2 with one error line on bad input, 130 on Ctrl-C."""
    return run_main(PROG, _summary_command, argv, on_interrupt="nothing written")


def _check(paths: Sequence[str]) -> None:
    """Every RUN a readable allreduce result, and the runs of each world size one sweep.

    Raises:
        UsageError: :func:`~distlab.judge.summary.read_run`'s own ``ValueError`` (a file that
            is not one) or :func:`~distlab.judge.summary.sweep_problem`'s words.
    """
    try:
        groups = group_runs(paths)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    for group in groups.values():
        problem = sweep_problem([r for _, r in group], [n for n, _ in group])
        if problem is not None:
            raise UsageError(problem)


def _summary_command(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    _check(args.runs)
    summary = summarize_files(args.runs, note=args.note)
    rows = [{"world_size": int(ws), **r} for ws, block in summary["world_sizes"].items()
            for r in block["rows"]]
    for ws, b in summary["world_sizes"].items():
        print(f"# world size {ws}: {count(len(b['runs']), 'run')}, {count(len(b['rows']), 'row')}")
    print(format_table(rows, SUMMARY_COLUMNS))
    print(f"# {summary['note']}")
    if args.out:
        print(f"# wrote {write_json(args.out, summary)}")
    wrong = sum(r["wrong"] for r in rows)
    if wrong:
        print(f"# FAILED: {wrong} wrong elements in the runs")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
