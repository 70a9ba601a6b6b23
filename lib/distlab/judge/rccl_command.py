"""``python -m distlab.judge rccl --published | --boxes``: RCCL's execution model judged on
published rccl-tests tables, table by table, or box by box.

    python -m distlab.judge rccl --published              # the model on every published table
    python -m distlab.judge rccl --published --json OUT   # and its points as JSON
    python -m distlab.judge rccl --boxes [--json OUT]     # the AMD boxes and NICs, with sources

The same reports as ``python -m distlab.rccl --judge`` and ``--boxes`` (:mod:`distlab.rccl`:
the constants fitted on the ``calibration`` tables, errors on every table, the ``held_out``
ones out of sample), as ``python -m distlab.judge nccl`` is for NVIDIA's. RCCL's choice and
time per size are the model's own command, ``python -m distlab.rccl``. Nothing is measured.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from distlab.cli import options
from distlab.cli.run import run_main
from distlab.evidence.rccl.inventory import boxes_report
from distlab.evidence.rccl.judged import judge_report

__all__ = ["PROG", "main"]

PROG = "python -m distlab.judge rccl"


def _parser() -> options.Parser:
    p = options.parser(PROG, __doc__)
    options.report_options(
        p, ("--published", "the execution model's error on every published table (what "
                           "python -m distlab.rccl --judge prints)"),
        boxes="the AMD boxes and NICs the model knows, each constant's source, each box's "
              "tables judged, and what it cannot price",
        json="also write the report as JSON to OUT")
    return p


def _rccl_command(argv: list[str]) -> int:
    p = _parser()
    args = p.parse_args(argv)
    if args.published == args.boxes:
        p.error("give one of --published or --boxes (RCCL's choice per size: python -m "
                "distlab.rccl)")
    return boxes_report(args.json) if args.boxes else judge_report(args.json)


def main(argv: Sequence[str] | None = None) -> int:
    """Exit 0, 2 with one error line, or 130 on Ctrl-C (one line, no traceback)."""
    return run_main(PROG, _rccl_command, argv, on_interrupt="nothing written")


if __name__ == "__main__":
    sys.exit(main())
