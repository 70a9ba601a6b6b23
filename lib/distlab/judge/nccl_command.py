"""``python -m distlab.judge nccl --published | --boxes``: NCCL's measured-time model judged on
published tables, table by table or box by box.

    python -m distlab.judge nccl --published                 # the model on every published table
    python -m distlab.judge nccl --published --write [PATH]  # refit the constants, write PATH
    python -m distlab.judge nccl --boxes [--json OUT]        # every box, network, release judged
    python -m distlab.judge nccl --alltoall [--write PATH]   # all-to-all: calibrated, held out

Prints the error on each published table the project holds, in sample (constants fitted on every
table) and leave-one-source-out (each source priced with constants fitted on the others), then
on each published multi-node table (2 and 4 nodes; out of sample, nothing is fitted on them),
then on each published point of another collective (all-gather, reduce-scatter) or of an
allreduce with an algorithm switched off, and whether the model makes the choice a source says
NCCL made (both out of sample too); the tables are :mod:`distlab.evidence.nccl.judged`'s.
``--write`` refits the constants on every published table and writes them to PATH (default
``execution_calibration.json`` in the current folder, never into the installed package); copy
it over ``lib/distlab/nccl/execution_calibration.json`` in a checkout to ship
it.
``--boxes`` lists every box, network and NCCL release the model knows, where each constant
comes from and how published tables judge it (n tables, points, median and p90 |error|; the
same report as ``python -m distlab.nccl --boxes``, :mod:`distlab.evidence.nccl.inventory`). NCCL's
choice per size on one box is ``python -m distlab.nccl BOX``. ``--alltoall`` judges NCCL's
all-to-all model (:mod:`distlab.nccl.alltoall`) on the published ``alltoall_perf`` tables: per
table the |time error| on the tables it is calibrated on and on the held-out ones
(:mod:`distlab.evidence.nccl.alltoall_judged`); with ``--write`` it refits the constants and writes
them to PATH (default ``alltoall_calibration.json``). Nothing is measured.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from distlab.cli import options
from distlab.cli.run import run_main
from distlab.evidence.nccl.judged import collective_lines, multinode_lines, published_lines

__all__ = ["PROG", "main"]

PROG = "python -m distlab.judge nccl"


def _parser() -> options.Parser:
    p = options.parser(PROG, __doc__)
    options.report_options(
        p, ("--published", "the model's error on every published table (the judgement this "
                           "command prints; NCCL's choice on one box: python -m distlab.nccl "
                           "BOX)"),
        boxes="every box, network and NCCL release the model knows, where each constant comes "
              "from and how published tables judge it (n tables, median, p90)",
        json="with --boxes: also write that report as JSON to OUT")
    p.add_argument("--alltoall", action="store_true",
                   help="NCCL's all-to-all model on the published alltoall_perf tables: "
                        "calibration and held-out error per table")
    p.add_argument("box", nargs="?", default=None, help=argparse.SUPPRESS)  # the old form
    p.add_argument("--write", nargs="?", const="execution_calibration.json", default=None,
                   metavar="PATH", type=options.output_file,
                   help="with --published: refit the constants on every published table and "
                        "write them to PATH (default: execution_calibration.json in the current "
                        "folder)")
    return p


def _nccl_command(argv: list[str]) -> int:
    p = _parser()
    args, rest = p.parse_known_args(argv)
    moved = {"--harness", "--nccl-version", "--nodes", "--network", "--sizes",
             "--collective", "-n", "--world-size"}
    if args.box is not None or moved & {a.split("=")[0] for a in rest}:
        same = " ".join(a for a in argv if a != "--published")
        p.error(f"NCCL's choice per size on a box is its own command now: "
                f"python -m distlab.nccl {same}")
    if rest:
        p.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.published and args.boxes:
        p.error("give one of --published or --boxes")
    if args.alltoall and (args.published or args.boxes):
        p.error("--alltoall is its own judgement: give it without --published or --boxes")
    if args.alltoall:
        from distlab.evidence.nccl.alltoall_judged import (
            fit_alltoall,
            judged_lines,
            write_calibration,
        )

        if args.json is not None:
            p.error("--json writes the --boxes report: give --boxes")
        constants = None
        if args.write is not None:
            constants = fit_alltoall()
            write_calibration(args.write, constants)
        print("\n".join(judged_lines(constants)))
        return 0
    if args.json is not None and not args.boxes:
        p.error("--json writes the --boxes report: give --boxes")
    if args.write is not None and not (args.published or args.alltoall):
        p.error("--write refits on the published tables: give --published")
    if args.boxes:
        from distlab.evidence.nccl.inventory import print_boxes

        print_boxes(args.json)
        return 0
    if not args.published:
        p.error("give --published or --boxes (NCCL's choice per size on a box: "
                "python -m distlab.nccl BOX)")
    print("\n".join(published_lines(write=args.write) + multinode_lines()
                    + collective_lines()))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Exit 0, 2 with one error line, or 130 on Ctrl-C (one line, no traceback)."""
    return run_main(PROG, _nccl_command, argv, on_interrupt="nothing written")


if __name__ == "__main__":
    sys.exit(main())
