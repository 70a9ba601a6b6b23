"""``python -m distlab.judge fit``: the planner judged on measured GPU runs (will it fit, how
fast).

    python -m distlab.judge fit results/gpu-h200-2026-11-27-fit         # per split, and verdicts
    python -m distlab.judge fit results/gpu-h200-2026-11-27-fit --runs  # and every run

Each run of a verify grid (``python -m distlab.plan.verify.grid``) is priced as it ran: its
step time and peak allocated and reserved bytes beside the measurement,
``error% = (measured - model) / model``, and the planner's verdict beside the run's (ran, or
out of memory). Rows of the models the grid's constants were measured on are the calibration
split; the rest are held out (:mod:`distlab.judge.fit_grid`). Nothing is measured.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from distlab.cli import options
from distlab.cli.run import UsageError, run_main
from distlab.judge.fit_grid import (
    MEMORY_TARGET,
    STEP_TARGET,
    GridRun,
    counts,
    judge_grid,
    summaries,
)
from distlab.report.table import Column, format_table

__all__ = ["PROG", "main", "report_lines"]

PROG = "python -m distlab.judge fit"
GiB = 2**30

SUMMARY_COLUMNS = (
    Column("split", "split", align="<"), Column("what", "what", align="<"), Column("n", "n"),
    Column("median %", "median", ".1f"), Column("p90 %", "p90", ".1f"),
    Column("max %", "max", ".1f"))
RUN_COLUMNS = (
    Column("run", "case", align="<"), Column("split", "split", align="<"),
    Column("allocator", "exp", align="<"),
    Column("step s", "step", ".3f"), Column("model", "mstep", ".3f"),
    Column("err%", "serr", "+.1f"),
    Column("alloc GiB", "alloc", ".1f"), Column("model", "malloc", ".1f"),
    Column("err%", "aerr", "+.1f"),
    Column("reserved", "res", ".1f"), Column("model", "mres", ".1f"),
    Column("err%", "rerr", "+.1f"),
    Column("verdict", "verdict", align="<"))


def _run_row(r: GridRun) -> dict[str, Any]:
    m = r.price.memory
    verdict = ("fits" if r.price.fits else "does not fit") + " / " + (
        "ran" if r.oom is None else "out of memory")
    return {"case": r.case, "split": r.split,
            "exp": ("cap " if r.capped else "") + ("exp" if r.expandable else ""),
            "step": r.step_s, "mstep": r.price.step.step_s, "serr": r.step_error_pct,
            "alloc": None if r.allocated is None else r.allocated / GiB,
            "malloc": m.allocated / GiB, "aerr": r.allocated_error_pct,
            "res": None if r.reserved is None else r.reserved / GiB,
            "mres": m.reserved / GiB, "rerr": r.reserved_error_pct, "verdict": verdict}


def report_lines(runs: Sequence[GridRun], *, every: bool = False) -> list[str]:
    """Per split the summaries against the targets, the verdicts, and every run with
    ``every``."""
    rows = []
    for split in ("calibration", "held_out"):
        for what, s in summaries(runs, split).items():
            rows.append({"split": split, "what": what, "n": s.n, "median": s.median,
                         "p90": s.p90, "max": s.max})
    lines = [format_table(rows, SUMMARY_COLUMNS)]
    lines += [counts(runs, split).line(split) for split in ("calibration", "held_out")]
    held = summaries(runs, "held_out")
    lines.append(f"held out: step median {held['step'].median:.1f}% (target {STEP_TARGET:g}%), "
                 f"reserved median {held['reserved'].median:.1f}% (target {MEMORY_TARGET:g}%)")
    wrong_yes = [r.case for r in runs if r.price.fits and r.oom is not None]
    wrong_no = [r.case for r in runs if not r.price.fits and r.oom is None]
    lines.append(f"verdicts: {sum(r.verdict_ok for r in runs)} of {len(runs)} agree with the "
                 f"run; 'fits' where it ran out of memory: {len(wrong_yes)}"
                 + (f" ({', '.join(wrong_yes)})" if wrong_yes else "")
                 + f"; 'does not fit' where it ran: {len(wrong_no)}"
                 + (f" ({', '.join(wrong_no)})" if wrong_no else ""))
    if every:
        lines.append(format_table([_run_row(r) for r in runs], RUN_COLUMNS))
    return lines


def _parser() -> options.Parser:
    p = options.parser(PROG, __doc__)
    p.add_argument("paths", nargs="+", metavar="GRID",
                   help="grid JSON files or folders holding grid*.json")
    p.add_argument("--runs", action="store_true", help="also list every run")
    return p


def _command(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    for path in args.paths:
        if not Path(path).exists():
            raise UsageError(f"{path}: no such file or folder")
    try:
        runs = judge_grid(args.paths)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print("\n".join(report_lines(runs, every=args.runs)))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Exit 0, 2 with one error line, or 130 on Ctrl-C."""
    return run_main(PROG, _command, argv)


if __name__ == "__main__":
    sys.exit(main())
